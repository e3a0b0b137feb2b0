"""A finished run's summary in OUTPUT_DIR, every program's one writer: what the program says of its run, the
goodput account of its faults (restarts in place, their seconds by phase) and, where the program knows its first
start, the run's wall-clock times; written atomically, last, and keeping any field an earlier write had."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_contract.atomic import atomic_write
from trainer_runtime.goodput import goodput_account


def write_summary(path: Path, fields: dict[str, Any], started_at: float | None = None) -> None:
    """``fields`` over what ``path`` held; ``started_at`` (the run's first start, unix time): its start, end and
    duration, restarts and their waits included (UTC, ISO 8601)."""
    times = {}
    if started_at is not None:
        finished = time.time()
        times = {"started_at": _iso(started_at), "finished_at": _iso(finished),
                 "duration_seconds": round(finished - started_at, 3)}
    summary = {**_earlier(path), **fields, **times, **goodput_account().summary()}
    atomic_write(path, (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode())


def _iso(unix_time: float) -> str:
    return datetime.fromtimestamp(unix_time, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _earlier(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
