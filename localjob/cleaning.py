"""`local-job clean`: remove what local-job keeps for a Job in its volume root, and say what went.

A volume root holds the claims' volumes (volumes/CLAIM/: what the pods wrote on the shared volume, checkpoints
and snapshots included, which a rerun would resume from), the pods' own directories (pods/), their logs (logs/),
the status (status.json) and the control directory (control/). A directory given with --volume CLAIM=DIR
lives elsewhere and is the user's: it is never touched. Nothing is removed while a local-job runs there, nor
from a directory that is not a volume root.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from localjob.eviction import running_controller
from localjob.records import LIVE_STATUS

# What local-job (and run.sh --local: image/, the empty stand-in for the image's working directory) creates.
ENTRIES = ("volumes", "pods", "logs", "control", "image", LIVE_STATUS)
DATA = "data"  # a claim's data/ directory: where the built-in worker keeps the downloaded MNIST


class CleanError(Exception):
    pass


def size_of(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(item.lstat().st_size for item in path.rglob("*") if not item.is_dir() or item.is_symlink())


def human(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return str(size)


def clean_root(root: Path, keep_data: bool = False) -> Iterator[str]:
    """Remove the Job's local state in ``root``; a line per thing removed (or why nothing was)."""
    if not root.exists():
        yield f"nothing to remove: no local state in {root}"
        return
    pid = running_controller(root)
    if pid is not None:
        raise CleanError(f"a local-job (pid {pid}) is running this Job in {root}: stop it first (Ctrl-C); nothing "
                         "was removed")
    present = [root / name for name in ENTRIES if (root / name).exists() or (root / name).is_symlink()]
    if not present:
        raise CleanError(f"{root} is not a local-job volume root (it has none of {', '.join(ENTRIES)}); nothing "
                         "was removed")
    kept: list[Path] = []
    for path in present:
        if keep_data and path.name == "volumes":
            yield from _clean_volumes_keeping_data(path, kept)
            continue
        size = size_of(path)
        _remove(path)
        yield f"removed {path} ({human(size)})"
    if kept:
        yield f"kept the data in {', '.join(map(str, kept))} (without --keep-data it goes too)"
    if not any(root.iterdir()):
        root.rmdir()
        yield f"removed the empty volume root {root}"


def _clean_volumes_keeping_data(volumes: Path, kept: list[Path]) -> Iterator[str]:
    for claim in sorted(volumes.iterdir()):
        if not claim.is_dir() or claim.is_symlink():
            size = size_of(claim)
            _remove(claim)
            yield f"removed {claim} ({human(size)})"
            continue
        for entry in sorted(claim.iterdir()):
            if entry.name == DATA and entry.is_dir() and not entry.is_symlink():
                kept.append(entry)
                continue
            size = size_of(entry)
            _remove(entry)
            yield f"removed {entry} ({human(size)})"
        if not any(claim.iterdir()):
            claim.rmdir()
    if not any(volumes.iterdir()):
        volumes.rmdir()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
