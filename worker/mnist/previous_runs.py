"""RESUME=false in an OUTPUT_DIR that holds another run: that run is moved, whole, into
OUTPUT_DIR/previous-runs/<when it was set aside>/ before this run writes anything. Two runs' checkpoints,
metrics, curves and models then never mix (a new run's checkpoints pruned for an old run's, two runs' epochs
in one metrics.jsonl), and neither is lost. Torch-free.
"""

from __future__ import annotations

import time
from pathlib import Path

from trainer_runtime.metrics import STARTS_DIRECTORY
from trainer_runtime.metrics_file import METRICS_FILE
from trainer_runtime.tensorboard_log import SUBDIRECTORY as CURVES
from worker.mnist.settings import MODEL_SUMMARY, MODEL_WEIGHTS

DIRECTORY = "previous-runs"
CHECKPOINTS = "checkpoints"  # TrainConfig.checkpoint_dir's name
# what one run writes into OUTPUT_DIR; model.json first: without it the place no longer reads as a finished run
RUN_ENTRIES = (MODEL_SUMMARY, MODEL_WEIGHTS, METRICS_FILE, CHECKPOINTS, CURVES, STARTS_DIRECTORY)


def set_aside(output_dir: Path, now: float | None = None) -> Path | None:
    """Move the run in ``output_dir`` to a new directory under previous-runs/ and return it; None if there is
    none. Each entry is one rename on the same volume: an interrupted move leaves every file whole, either in
    its old place or in the new one (the next RESUME=false start moves the rest)."""
    present = [output_dir / name for name in RUN_ENTRIES if (output_dir / name).exists()]
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
