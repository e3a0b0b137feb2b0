"""What the tests of CHECKPOINT_EVERY_SECONDS share: runs whose steps last long enough on any machine, and the
checkpoints a run left (with KEEP_CHECKPOINTS high enough to keep them all), with when each was written."""

from __future__ import annotations

from pathlib import Path

from trainer_contract import checkpoint_layout as layout


def slow_steps(seconds: float) -> str:
    """FAULT_INJECT's entry that makes every step last ``seconds`` or more: rank 0 sleeps before each, and the
    others wait for it in the step's collective."""
    return f"sleep={seconds}@batch,rank=0"


def written_by_step(directory: Path) -> list[tuple[int, float]]:
    """(optimizer step, when it was written) of each step-N.ckpt checkpoint in ``directory``, oldest first (a
    directory of shards: when its last file went in)."""
    return sorted((order[0], path.stat().st_mtime) for order, path in layout.list_checkpoints(directory,
                                                                                            layout.OPTIMIZER_STEP))


def gaps_by_time(written: list[tuple[int, float]], per_epoch: int) -> list[float]:
    """Seconds from each checkpoint to the next when that one was taken mid-epoch: by time (an epoch's end
    checkpoints whatever the clock says)."""
    return [later[1] - earlier[1] for earlier, later in zip(written, written[1:], strict=False)
            if later[0] % per_epoch]
