"""Reruns and resumes are safe: a finished run is reported, not redone; changed settings are refused, by name."""

import json
import os
import shutil
import signal
import stat
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.launcher.test_launch import snapshot
from tests.mnist.launch import rank_command, read_until, run, start, torchrun_command, worker_env
from trainer_contract import exit_codes

pytestmark = pytest.mark.slow

SETTINGS = dict(EPOCHS=2, BATCH_SIZE=32, OMP_NUM_THREADS=1)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, small_dir):
    """One finished 2-process run, shared: the tests that only read it check that it stays byte-identical;
    a test that changes it works on a copy."""
    out = tmp_path_factory.mktemp("finished") / "out"
    result = run(torchrun_command(2), worker_env(small_dir, out, **SETTINGS))
    assert result.returncode == 0, result.stdout[-3000:]
    return out


def test_a_rerun_on_a_finished_output_dir_changes_no_file(finished, small_dir):
    before = snapshot(finished)
    summary = json.loads((finished / "model.json").read_text())
    assert summary["accuracy"] is not None
    for command in (torchrun_command(2), rank_command()):  # the gang, and one process alone
        again = run(command, worker_env(small_dir, finished, **SETTINGS))
        assert again.returncode == 0, again.stdout[-3000:]
        assert f"the run in {finished} is already complete (2 epochs, test accuracy" in again.stdout
        assert "epoch: 1/2" not in again.stdout
        assert snapshot(finished) == before  # every byte and every mtime


def test_a_rerun_with_another_setting_is_refused(finished, small_dir):
    before = snapshot(finished)
    result = run(rank_command(), worker_env(small_dir, finished, **{**SETTINGS, "EPOCHS": 3, "SEED": 5}))
    assert result.returncode == exit_codes.BAD_CONFIG, result.stdout[-3000:]
    assert f"EPOCHS: the finished run in {finished} was trained with EPOCHS=2, now 3" in result.stdout
    assert "SEED: " in result.stdout and "SEED=0, now 5" in result.stdout
    assert snapshot(finished) == before


def interrupted_after_epoch_1(tmp_path, small_dir, nproc=1, **settings):
    """A run of 3 epochs that crashed in epoch 2, once epoch 1's checkpoint was on disk: its newest checkpoint.
    (Crashing at a batch of epoch 2 instead raced the asynchronous save on a loaded machine: seen in CI.)"""
    out = tmp_path / "interrupted"
    env = worker_env(small_dir, out, **{**SETTINGS, "EPOCHS": 3, "FAULT_INJECT": "exit=1@written=1,rank=0",
                                        **settings})
    result = run(torchrun_command(nproc) if nproc > 1 else rank_command(), env)
    assert result.returncode != 0 and "checkpoint ckpt-e0001-s000000.pt written" in result.stdout, result.stdout
    return out


def test_a_changed_learning_rate_on_resume_is_refused_and_nothing_is_written(tmp_path, small_dir):
    out = interrupted_after_epoch_1(tmp_path, small_dir)
    (out / "checkpoints" / ".tmp-ckpt-e0002-s000000.pt.left").write_bytes(b"half a checkpoint")
    before = snapshot(out)
    result = run(torchrun_command(2), worker_env(small_dir, out, **{**SETTINGS, "EPOCHS": 3, "LEARNING_RATE": 0.01}))
    assert result.returncode != 0
    assert ("configuration error: LEARNING_RATE: checkpoint ckpt-e0001-s000000.pt was trained with "
            "LEARNING_RATE=0.004, now 0.01") in result.stdout
    assert "either put the old value(s) back, or start a new run: another OUTPUT_DIR" in result.stdout
    assert "exited with exit code 78" in result.stderr or "exitcode: 78" in result.stderr
    assert snapshot(out) == before  # not even the stale temporary was touched
    # putting the value back resumes
    resumed = run(rank_command(), worker_env(small_dir, out, **{**SETTINGS, "EPOCHS": 3}))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "resuming from ckpt-e0001-s000000.pt" in resumed.stdout
    # RESUME=false is the other way out: a new run from scratch
    fresh = run(rank_command(), worker_env(small_dir, out, **{**SETTINGS, "LEARNING_RATE": 0.01, "RESUME": "false"}))
    assert fresh.returncode == 0 and "epoch: 1/2" in fresh.stdout


def test_another_world_size_resumes_at_an_epoch_boundary(tmp_path, small_dir):
    out = interrupted_after_epoch_1(tmp_path, small_dir, nproc=2)
    resumed = run(rank_command(), worker_env(small_dir, out, **{**SETTINGS, "EPOCHS": 3}))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "resuming from ckpt-e0001-s000000.pt" in resumed.stdout
    assert json.loads((out / "model.json").read_text())["world_size"] == 1


def test_a_mid_epoch_checkpoint_refuses_another_world_size(tmp_path, small_dir):
    out = tmp_path / "out"
    env = worker_env(small_dir, out, **{**SETTINGS, "BATCH_SIZE": 8, "LOG_INTERVAL": 1})
    process = start(torchrun_command(2), env)
    seen = []
    assert read_until(process, "Rank 1: epoch: 1/2, batch: 5/", 120, seen), "".join(seen)
    os.kill(process.pid, signal.SIGTERM)
    process.communicate(timeout=60)
    (checkpoint,) = [p.name for p in (out / "checkpoints").iterdir()]
    assert checkpoint.startswith("ckpt-e0000-s")  # mid-epoch
    before = snapshot(out)
    result = run(rank_command(), worker_env(small_dir, out, **{**SETTINGS, "BATCH_SIZE": 8}))
    assert result.returncode == exit_codes.BAD_CONFIG, result.stdout[-3000:]
    assert (f"WORLD_SIZE: checkpoint {checkpoint} was taken in the middle of epoch 1 (after batch "
            in result.stdout)
    assert "with 2 processes, now 1" in result.stdout and f"or remove {checkpoint}" in result.stdout
    assert snapshot(out) == before


def test_a_run_resumed_at_its_end_keeps_its_result(finished, small_dir, tmp_path):
    """The final checkpoint is written, then the pod dies before model.json: the rerun restores the result."""
    finished = Path(shutil.copytree(finished, tmp_path / "finished"))
    summary = json.loads((finished / "model.json").read_text())
    (finished / "model.json").unlink()
    (finished / "model.pt").unlink()
    started = time.monotonic()
    again = run(rank_command(), worker_env(small_dir, finished, **SETTINGS))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "resuming from ckpt-e0002-s000000.pt" in again.stdout and "epoch: 2/2" not in again.stdout
    restored = json.loads((finished / "model.json").read_text())
    assert restored["accuracy"] == summary["accuracy"] and restored["loss"] == summary["loss"]
    assert set(summary) <= set(restored)  # no field lost
    assert time.monotonic() - started < 60


def test_resume_false_keeps_the_earlier_run_whole_and_apart(finished, small_dir, tmp_path):
    """RESUME=false in an OUTPUT_DIR holding a finished run: that run moves, byte for byte, to previous-runs/;
    the new run's checkpoints, metrics and model are its own (none pruned for, or appended to, the old run's)."""
    out = Path(shutil.copytree(finished, tmp_path / "out"))
    before = snapshot(out)
    fresh = run(rank_command(), worker_env(small_dir, out, **{**SETTINGS, "EPOCHS": 1, "RESUME": "false"}))
    assert fresh.returncode == 0, fresh.stdout[-3000:]
    (kept,) = (out / "previous-runs").iterdir()
    assert f"RESUME=false: the run that was in {out} is kept, whole, in {kept}" in fresh.stdout
    # the pods' own files stay: the launchers' ledger, the usage logs (trainer_runtime.previous_runs)
    moved = {name: content for name, content in before.items() if not name.startswith((".gang", "logs/"))}
    assert {name: content[0] for name, content in snapshot(kept).items()} == \
        {name: content[0] for name, content in moved.items()}
    epochs = [json.loads(line)["epoch"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["ckpt-e0001-s000000.pt"]
    assert json.loads((out / "model.json").read_text())["epochs"] == 1
    # the new run is now the one a rerun finds
    again = run(rank_command(), worker_env(small_dir, out, **{**SETTINGS, "EPOCHS": 1}))
    assert again.returncode == 0 and "is already complete (1 epochs" in again.stdout


def test_already_complete_names_what_the_rerun_asked_for_differently(finished, small_dir):
    before = snapshot(finished)
    again = run(rank_command(), worker_env(small_dir, finished, **{**SETTINGS, "STRATEGY": "ddp"}))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "it was trained with STRATEGY=allreduce, not as asked now" in again.stdout
    assert "RESUME=false (the run there is kept in OUTPUT_DIR/previous-runs/)" in again.stdout
    assert snapshot(finished) == before


def test_model_json_has_typed_values_times_and_a_readable_mode(finished):
    summary = json.loads((finished / "model.json").read_text())
    config = summary["config"]
    assert config["epochs"] == 2 and config["learning_rate"] == 0.004 and config["data_shared"] is True
    assert config["mnist_mirror"] is None and config["output_dir"] == str(finished)
    started = datetime.fromisoformat(summary["started_at"].replace("Z", "+00:00"))
    ended = datetime.fromisoformat(summary["finished_at"].replace("Z", "+00:00"))
    assert 0 < summary["duration_seconds"] < 600 and abs((ended - started).total_seconds()
                                                           - summary["duration_seconds"]) <= 1.5
    assert 0 <= summary["accuracy"] <= 1  # a fraction, as in every log line ("test accuracy=0.9812")
    umask = os.umask(0)
    os.umask(umask)
    for name in ("model.json", "model.pt", "metrics.jsonl"):
        assert stat.S_IMODE((finished / name).stat().st_mode) == 0o666 & ~umask, name
