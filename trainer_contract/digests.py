"""Digests of files read in 1 MiB blocks (MNIST archives and files, sharded checkpoints, a model's revision, what
the stager fetches and uploads), and the ones the stager already verified: no torch import."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

_SHA256 = re.compile(r"[0-9a-f]{64}")


def file_digest(path: Path, algorithm: str | Any = "sha256") -> str:
    """``path``'s digest in hex: of ``algorithm`` by name, or fed into a hashlib object (maybe already fed a prefix,
    as a git blob id is)."""
    digest = hashlib.new(algorithm, usedforsecurity=False) if isinstance(algorithm, str) else algorithm
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def staged_sha256s(directory: Path) -> dict[str, tuple[int, str]]:
    """The SHA-256 the stager verified for each file it staged into ``directory`` (its marker: a Hub file's LFS
    sha256, an S3 object's), by relative name, with the size it had: a file whose size still matches need not be
    read again to be known (a 7B model's 15 GB at every start, on every rank). The marker is the volume's, so an
    entry that is not a size and a SHA-256 is left out (that file is hashed)."""
    from trainer_contract.storage import MARKER
    from trainer_contract.volume_notes import read_json_note

    files = (read_json_note(directory / MARKER) or {}).get("files")
    if not isinstance(files, dict):
        return {}
    return {name: (entry["bytes"], entry["sha256"]) for name, entry in files.items()
            if isinstance(entry, dict) and type(entry.get("bytes")) is int and isinstance(entry.get("sha256"), str)
            and _SHA256.fullmatch(entry["sha256"])}


def known_or_hashed(path: Path, name: str, known: dict[str, tuple[int, str]]) -> str:
    """``path``'s SHA-256: the stager's (``known``, by ``name``) where the file still has its size, else read."""
    size, digest = known.get(name, (-1, ""))
    return digest if size == path.stat().st_size else file_digest(path)
