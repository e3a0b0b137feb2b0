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


def killed_after_checkpoints_by_time_then_resumed(run, output: Path, by_time: dict, every: float, per_epoch: int,
                                                  kill_at: str, dies_before: int) -> tuple[int, str]:
    """``run(output, settings)`` with CHECKPOINT_EVERY_SECONDS=``every`` and slow steps, rank 1 killed at batch
    ``kill_at`` (epoch.batch, before step ``dies_before``): two or more checkpoints came mid-epoch, each at least
    ``every`` after the one before, and epoch 1's end checkpointed. Then the run again with the same settings (the
    kill was for the first start only), which resumes from the newest. That step, and the resumed run's output."""
    from tests.mnist.launch import fault_env

    fault = fault_env(f"{slow_steps(0.1)}; sigkill@batch={kill_at},rank=1,attempt=0")
    settings = {**by_time, **fault}
    killed = run(output, settings)
    assert killed.returncode != 0
    written = written_by_step(output / "checkpoints")
    mid_epoch = [step for step, _ in written if step % per_epoch]
    assert len(mid_epoch) >= 2 and per_epoch in dict(written), written
    assert min(gaps_by_time(written, per_epoch)) >= every, written
    newest = written[-1][0]
    assert per_epoch < newest < dies_before, written  # after epoch 1's end, before the kill
    resumed = run(output, settings)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"Rank 0: resuming from {layout.step_checkpoint_name(newest)}" in resumed.stdout
    return newest, resumed.stdout
