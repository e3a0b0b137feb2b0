"""metrics.jsonl: rank 0's record of a run, one JSON object per line, for every workload (MNIST per epoch, the
transformer loop per reported step and evaluation). One writer: append a line; on a resume, keep only what the
checkpoint holds (TensorBoard's purge_step does the same for the curves), so that nothing is recorded twice.

The file outlives kills: a process killed mid-append leaves a torn last line, a volume a line of anything. Such
a line holds no record: the trim drops it (with what follows the checkpoint) instead of failing the resume, and
rewrites the file atomically, so a kill during the trim leaves the old file or the new one, never a half."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainer_contract.atomic import atomic_write

METRICS_FILE = "metrics.jsonl"


def append(output_dir: Path, record: dict[str, Any]) -> None:
    """One record, one line (one write: a kill tears at most this line)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    with (output_dir / METRICS_FILE).open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def keep_up_to(output_dir: Path, key: str, last: float) -> int:
    """Keep the records whose ``key`` is at most ``last``; drop the rest and every line that is no record.
    Returns how many lines went (0: the file is untouched)."""
    path = output_dir / METRICS_FILE
    if not path.is_file():
        return 0
    # lines end at "\n" only: str.splitlines would also cut a torn line at \x1c-\x1e, \x85 or \u2028 and count it twice
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    kept = [line for line in lines if _position(line, key) <= last]
    if len(kept) != len(lines):
        atomic_write(path, "".join(line + "\n" for line in kept).encode())
    return len(lines) - len(kept)


def _position(line: str, key: str) -> float:
    """The record's ``key`` (its epoch, its step); infinity for a line that is no record of one."""
    try:
        record = json.loads(line)
        value = float(record[key])
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        return math.inf
    return value if math.isfinite(value) else math.inf
