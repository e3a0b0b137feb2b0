"""RESUME=false in an OUTPUT_DIR that holds another run, for every program: that run is moved, whole, into
OUTPUT_DIR/previous-runs/<when it was set aside>/ before this run writes anything. Two runs' checkpoints,
metrics, curves and models then never mix (a new run's checkpoints pruned for an old run's higher steps, two runs'
records in one metrics.jsonl), and neither is lost. Torch-free.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trainer_runtime.metrics import STARTS_DIRECTORY
from trainer_runtime.metrics_file import METRICS_FILE
from trainer_runtime.tensorboard_log import SUBDIRECTORY as CURVES

DIRECTORY = "previous-runs"
CHECKPOINTS = "checkpoints"  # the programs' default CHECKPOINT_DIR, below OUTPUT_DIR
# what every run writes into OUTPUT_DIR, beside what a program names (its finished-run mark first: without it
# the place no longer reads as a finished run)
RUN_ENTRIES = (METRICS_FILE, CHECKPOINTS, CURVES, STARTS_DIRECTORY)


def set_aside(output_dir: Path, program_entries: tuple[str, ...], now: float | None = None) -> Path | None:
    """Move the run in ``output_dir`` (the program's entries, glob patterns, then RUN_ENTRIES) to a new directory
    under previous-runs/ and return it; None if there is none. Each entry is one rename on the same volume: an
    interrupted move leaves every file whole, either in its old place or in the new one (the next RESUME=false
    start moves the rest)."""
    present = [path for pattern in (*program_entries, *RUN_ENTRIES) for path in sorted(output_dir.glob(pattern))]
    if not present:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    target = output_dir / DIRECTORY / stamp
    suffix = 1
    while target.exists():
        suffix += 1
        target = output_dir / DIRECTORY / f"{stamp}-{suffix}"
    target.mkdir(parents=True)
    for entry in present:
        entry.rename(target / entry.name)
    return target


def start_anew(output_dir: Path, program_entries: tuple[str, ...], log: Callable[[str], None]) -> None:
    """RESUME=false's first act, by rank 0 before any rank writes: the run there set aside, and said."""
    moved = set_aside(output_dir, program_entries)
    if moved is not None:
        log(f"RESUME=false: the run that was in {output_dir} is kept, whole, in {moved}; this run starts from the "
            "beginning")
