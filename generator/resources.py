"""Where the templates and the default values live, installed or in a source checkout."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

_PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    # A regular install puts templates/ and variables/ inside the package (setup.cfg package_dir);
    # in a source checkout or an editable install they are the top-level folders of the repository.
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir() and any(candidate.iterdir()):
            return candidate
    raise FileNotFoundError(f"indexed-trainer is installed without its {name}/ folder; reinstall it")


def templates_dir() -> Path:
    return _data_dir("templates")


def default_values_path() -> Path:
    return _data_dir("variables") / "variables.json"


def schema_path() -> Path:
    return _data_dir("variables") / "variables.schema.json"


@functools.cache
def schema() -> dict[str, Any]:
    """The values' JSON Schema, read once per process (validation, the targets' keys, the reference). Read only."""
    return json.loads(schema_path().read_text(encoding="utf-8"))


@functools.cache
def default_values() -> dict[str, Any]:
    """The shipped defaults, read once per process. Read only: values are merged into copies."""
    return json.loads(default_values_path().read_text(encoding="utf-8"))
