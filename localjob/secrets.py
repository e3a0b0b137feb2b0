"""Secrets for local-job (--secret NAME=PATH), read as `kubectl create secret generic` reads them.

    --secret hf=./hf.env          # --from-env-file: KEY=VALUE lines; '#' comments and blank lines skipped
    --secret creds=./creds/       # --from-file on a directory: one key per regular file, named as the file

Values are never printed: an error names the Secret, the file and the line or key, never what it holds.
"""

from __future__ import annotations

import re
from pathlib import Path

from localjob.manifests import ManifestError

_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def read_secret(name: str, path: Path) -> dict[str, str]:
    if path.is_dir():
        return _from_directory(name, path)
    if path.is_file():
        return _from_env_file(name, path)
    raise ManifestError(f"--secret {name}={path}: no such file or directory")


def _from_directory(name: str, path: Path) -> dict[str, str]:
    data = {}
    for item in sorted(path.iterdir()):
        if not item.is_file() or not _KEY.match(item.name):
            continue  # as kubectl: subdirectories and names that are not valid keys are left out
        try:
            data[item.name] = item.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ManifestError(f"--secret {name}={path}: key {item.name} is not UTF-8 text; local-job passes "
                                "Secrets as text") from None
    if not data:
        raise ManifestError(f"--secret {name}={path}: the directory holds no file named as a valid key")
    return data


def _from_env_file(name: str, path: Path) -> dict[str, str]:
    data = {}
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ManifestError(f"--secret {name}={path}: not UTF-8 text") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.lstrip()
        if not sep or not _ENV_KEY.match(key):
            raise ManifestError(f"--secret {name}={path}: line {number} is not KEY=VALUE with KEY a variable name "
                                "(the line is not shown: it may hold a secret)")
        data[key] = value  # no quote handling, as kubectl --from-env-file
    return data
