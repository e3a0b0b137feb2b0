"""Real training runs: torchrun with gloo on 127.0.0.1, the logs, the files, the accuracy."""

import json
import re

import pytest
import torch

from tests.mnist.launch import rank_command, run, worker_env
from worker.mnist.data import load_split
from worker.mnist.model import MnistCNN

pytestmark = pytest.mark.slow


def test_torchrun_two_processes_train_to_the_documented_accuracy(digits_dir, default_run):
    out, log = default_run
    # the seed's log format, every LOG_INTERVAL batches and at the last batch of each epoch
    assert re.search(r"^Rank 0: epoch: 5/5, batch: 63/63, mini-batch size: 32$", log, re.M)
    assert re.search(r"^Rank 1: epoch: 1/5, batch: 50/63, mini-batch size: 64$", log, re.M)
    losses = re.findall(r"^Rank (\d): epoch 5/5, average epoch loss=(\d+\.\d+)$", log, re.M)
    assert sorted(rank for rank, _ in losses) == ["0", "1"] and losses[0][1] == losses[1][1]
    assert re.search(r"^Rank 0: training completed\.$", log, re.M)
    assert re.search(r"^Rank 1: training completed\.$", log, re.M)
    assert len(re.findall(r"batch: \d+/63", log)) == 2 * 5 * 2  # not every batch: batches 50 and 63

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2, 3, 4, 5]
    assert all(m["world_size"] == 2 and m["images_per_second"] > 0 for m in metrics)
    summary = json.loads((out / "model.json").read_text())
    assert summary["world_size"] == 2 and summary["parameters"] == 184586
    # the saved model really is that good: evaluate it here, independently of the worker's own numbers
    model = MnistCNN()
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    model.eval()
    images, labels = load_split(digits_dir, train=False)
    with torch.inference_mode():
        accuracy = (model(images).argmax(1) == labels).float().mean().item()
    assert accuracy == pytest.approx(summary["accuracy"], abs=1e-6)
    assert accuracy >= 0.985
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "ckpt-e0003-s000000.pt", "ckpt-e0004-s000000.pt", "ckpt-e0005-s000000.pt"]
    # every process's usage log, from every program's shell (trainer_runtime.run_shell): a line at least (its last)
    for rank in (0, 1):
        lines = (out / "logs" / f"usage-rank{rank}.log").read_text().splitlines()
        assert lines and all(re.search(rf" rank {rank} cpu \d+% rss \d+ MiB peak \d+ MiB$", line) for line in lines)


def test_runs_as_one_plain_python_process(small_dir, tmp_path):
    result = run(rank_command(), worker_env(small_dir, tmp_path / "out", EPOCHS=1))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Rank 0: training completed." in result.stdout
    assert (tmp_path / "out" / "model.pt").exists()


def test_missing_data_without_download_fails_with_the_data_exit_code(tmp_path):
    result = run(rank_command(), worker_env(tmp_path / "nothing", tmp_path / "out", DOWNLOAD="false"))
    assert result.returncode == 69
    assert "DOWNLOAD is false" in result.stdout
