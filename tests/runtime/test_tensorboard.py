"""TensorBoard curves (trainer_runtime.tensorboard_log, every program's writer), read back with tensorboard's own
reader: MNIST's scalars per epoch and per LOG_INTERVAL, the transformer workloads' per reported step, and a run
killed and resumed continues the same curves with no point twice and none missing; without the tensorboard package
a run goes on with its records in metrics.jsonl."""

import json
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tests.mnist.launch import rank_command, run, torchrun_command, worker_env
from trainer_runtime.run_log import RunLog

EPOCH_TAGS = {"epoch/loss", "epoch/accuracy", "epoch/learning_rate", "epoch/images_per_second",
              "epoch/sync_ms_per_step", "epoch/backward_ms_per_step"}


def curves(output_dir: Path) -> dict[str, list[tuple[int, float]]]:
    accumulator = EventAccumulator(str(output_dir / "tensorboard"))
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def raw_steps(output_dir: Path, tag: str) -> list[int]:
    """Every step written for ``tag`` in every event file, before the reader's purge."""
    steps = []
    for path in sorted((output_dir / "tensorboard").iterdir()):
        for event in EventFileLoader(str(path)).Load():
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return steps


@pytest.mark.slow
def test_killed_and_resumed_run_continues_the_same_curves_without_duplicates(small_dir, tmp_path):
    settings = dict(EPOCHS=3, BATCH_SIZE=32, LOG_INTERVAL=1, OMP_NUM_THREADS=1)  # 1024 images: 32 steps/epoch
    out = tmp_path / "out"
    killed = run(rank_command(), worker_env(small_dir, out, FAULT_INJECT="sigkill@batch=2.25", **settings))
    assert killed.returncode == -9, killed.stdout
    resumed = run(rank_command(), worker_env(small_dir, out, **settings))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "resuming from ckpt-e0001-s000000.pt" in resumed.stdout

    # the killed run had flushed batch losses of epoch 2 beyond its checkpoint; the resumed run wrote them again
    assert len(raw_steps(out, "train/loss")) > 96
    scalars = curves(out)
    assert EPOCH_TAGS | {"train/loss", "train/learning_rate"} <= set(scalars)
    # the x-axis counts training images: 32 per step, 1024 per epoch; each point once, none missing
    assert [step for step, _ in scalars["train/loss"]] == [32 * k for k in range(1, 97)]
    assert [step for step, _ in scalars["train/learning_rate"]] == [32 * k for k in range(1, 97)]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for tag in EPOCH_TAGS:
        assert [step for step, _ in scalars[tag]] == [1024, 2048, 3072], tag
        key = tag.split("/")[1]
        assert [value for _, value in scalars[tag]] == pytest.approx([m[key] for m in metrics], rel=1e-6), tag


@pytest.mark.slow
def test_two_ranks_write_one_set_of_curves(small_dir, tmp_path):
    out = tmp_path / "out"
    result = run(torchrun_command(2), worker_env(small_dir, out, EPOCHS=2, BATCH_SIZE=32, OMP_NUM_THREADS=1))
    assert result.returncode == 0, result.stdout[-3000:]
    assert len(list((out / "tensorboard").iterdir())) == 1  # rank 0's event file only
    scalars = curves(out)
    assert [step for step, _ in scalars["epoch/accuracy"]] == [1024, 2048]  # images, whatever the world size
    # LOG_INTERVAL 50 and the last batch of each 16-step epoch: the last batch only
    assert [step for step, _ in scalars["train/loss"]] == [1024, 2048]


@pytest.mark.slow
def test_tensorboard_false_writes_no_event_files(small_dir, tmp_path):
    out = tmp_path / "out"
    result = run(rank_command(), worker_env(small_dir, out, EPOCHS=1, TRAIN_SAMPLES=128, TENSORBOARD="false"))
    assert result.returncode == 0, result.stdout[-3000:]
    assert not (out / "tensorboard").exists()


def trained(log: RunLog, steps: range, total: int = 6) -> None:
    for step in steps:
        log.trained(epoch=1, epochs=1, step=step, total=total, loss=1.0 / step, learning_rate=0.1)


def test_a_transformer_run_resumed_at_its_checkpoint_keeps_that_step_and_writes_each_step_once(tmp_path):
    """Checkpointed at step 3, killed after step 5 was logged (each record is flushed), resumed at 3: the curves
    hold steps 1 to 6 once each, as metrics.jsonl does; the checkpoint's own step is not dropped (the resumed run
    does not log it again)."""
    killed = RunLog(0, tmp_path, log_interval=1, tensorboard=True)
    killed.start(0, 6)
    trained(killed, range(1, 6))  # never closed: the process was killed
    resumed = RunLog(0, tmp_path, log_interval=1, tensorboard=True)
    resumed.start(3, 6)
    trained(resumed, range(4, 7))
    resumed.close()
    assert sorted(raw_steps(tmp_path, "train/loss")) == [1, 2, 3, 4, 4, 5, 5, 6]  # 4 and 5 written twice
    scalars = curves(tmp_path)
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3, 4, 5, 6]
    assert [value for _, value in scalars["train/loss"]] == pytest.approx([1.0 / step for step in range(1, 7)])
    records = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records == [1, 2, 3, 4, 5, 6]


def test_a_transformer_run_started_afresh_replaces_the_curves_of_one_killed_before_its_first_checkpoint(tmp_path):
    killed = RunLog(0, tmp_path, log_interval=1, tensorboard=True)
    killed.start(0, 6)
    trained(killed, range(1, 4))
    fresh = RunLog(0, tmp_path, log_interval=1, tensorboard=True)
    fresh.start(0, 6)
    trained(fresh, range(1, 3))
    fresh.close()
    assert [step for step, _ in curves(tmp_path)["train/loss"]] == [1, 2]


def test_without_the_tensorboard_package_a_run_goes_on_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # its import raises ImportError
    log = RunLog(0, tmp_path, log_interval=1, tensorboard=True)
    log.start(0, 2)
    trained(log, range(1, 3), total=2)
    log.close()
    assert "the tensorboard package is not installed" in capsys.readouterr().out
    assert not (tmp_path / "tensorboard").exists()
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
