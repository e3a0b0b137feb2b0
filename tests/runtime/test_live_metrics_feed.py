"""What the runtime's progress reporters put into the live metrics (trainer_runtime/metrics.py), scraped from a
real prometheus_client server on 127.0.0.1: the transformer workloads' RunLog (tokens, evaluation scores), the
checkpoint store (a checkpoint's step from its name), and the start count that says how often a run restarted."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from localjob.ports import free_port
from trainer_contract import checkpoint_layout as layout
from trainer_contract import metrics as contract
from trainer_runtime import metrics
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.run_log import RunLog


@pytest.fixture
def served(monkeypatch):
    """This process's live metrics, served on a free port for the test (the process-wide one replaced)."""
    lines: list[str] = []
    live = metrics.Live(free_port(), lines.append)
    monkeypatch.setattr(metrics, "_live", live)
    yield live, lines
    live.close()


def scrape(live: metrics.Live) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{live.port}/metrics", timeout=5) as answer:
        return contract.parse(answer.read().decode())


def test_a_transformer_run_log_publishes_progress_tokens_and_scores(served, tmp_path):
    live, lines = served
    assert lines == [f"metrics: serving http://0.0.0.0:{live.port}/metrics (Prometheus' format)"]
    run_log = RunLog(0, tmp_path, log_interval=1, tensorboard=False)
    assert scrape(live) == {}  # nothing known yet: no gauge shows a 0 that means nothing
    run_log.start(10, 40)
    run_log.tokens = 5000
    run_log.trained(epoch=1, epochs=2, step=20, total=40, loss=0.75, learning_rate=1e-4)
    run_log.evaluated(20, 1, {"exact_match": 61.5, "f1": 70.25}, "exact match 61.50, F1 70.25")
    samples = scrape(live)
    assert samples["step"] == 20 and samples["steps_planned"] == 40 and samples["epochs_planned"] == 2
    assert samples["loss"] == 0.75 and samples['throughput_per_second{unit="tokens"}'] > 0
    assert samples['evaluation{metric="exact_match"}'] == 61.5 and samples['evaluation{metric="f1"}'] == 70.25
    assert samples["eta_seconds"] >= 0 and samples["restarts"] == 0
    assert samples['peak_memory_bytes{device="cpu"}'] > 10 * 2**20
    RunLog(0, tmp_path, log_interval=1, tensorboard=False).start(20, 40)  # the run starts again
    assert scrape(live)["restarts"] == 1


def test_a_published_checkpoint_shows_its_step_whichever_naming(served, tmp_path):
    live, _ = served
    store = CheckpointStore(tmp_path, layout.OPTIMIZER_STEP, keep=2, log=lambda message: None)
    (tmp_path / layout.step_checkpoint_name(120)).write_bytes(b"x")
    store.published(tmp_path / layout.step_checkpoint_name(120))
    assert scrape(live)["last_checkpoint_step"] == 120
    live.started(0, steps_per_epoch=50)  # MNIST's names count epochs and batches
    mnist = CheckpointStore(tmp_path / "m", layout.EPOCH_STEP, keep=2, log=lambda message: None)
    path = tmp_path / "m" / layout.Position(3, 7).filename()
    path.parent.mkdir()
    path.write_bytes(b"x")
    mnist.published(path)
    samples = scrape(live)
    assert samples["last_checkpoint_step"] == 3 * 50 + 7
    line = contract.summary(samples, now=samples["last_checkpoint_timestamp_seconds"] + 65)
    assert "last checkpoint step 157 (1 min 05 s ago)" in line


def test_a_port_already_taken_costs_the_endpoint_not_the_run():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        lines: list[str] = []
        live = metrics.Live(taken.getsockname()[1], lines.append)
        live.progress(3, steps=10)  # still records
        assert live.port is None and lines[0].startswith(f"metrics: cannot serve on port {taken.getsockname()[1]}")
        assert lines[0].endswith("training goes on without them")


def test_a_scrape_of_anything_parses_or_is_skipped():
    text = "# HELP x\nindexed_trainer_step 12\nindexed_trainer_loss NaN\nindexed_trainer_bad x y\nother 1\n"
    assert contract.parse(text) == {"step": 12.0, "loss": pytest.approx(float("nan"), nan_ok=True)}
    assert contract.summary(contract.parse(text)) == "step 12"
    assert contract.summary({}) is None
