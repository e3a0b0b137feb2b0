"""The live metrics of a running job, through the real path: gen-manifests renders the port, local-job
gives each pod a port of its own, the MNIST worker's local rank 0 serves Prometheus' format while it trains; a
scrape parses with prometheus_client's own parser and agrees with the run; `local-job status` shows index 0's in
one line; a user's program publishes the same through trainer_runtime.metrics."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BIN, OUTSIDE
from tests.localjob.test_local_job_runs import SMALL, local_job_args, volume
from tests.mnist.launch import fault_env
from tests.rendering import gen_manifests
from trainer_contract import metrics

pytestmark = pytest.mark.slow


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return None


def test_a_local_job_serves_live_metrics_that_parse_and_agree_with_the_run(tmp_path):
    claim = volume(tmp_path, SMALL)
    manifests = gen_manifests("replicas=2", "config_map={EPOCHS: '4', LOG_INTERVAL: '2', BATCH_SIZE: '16'}")
    # both ranks pause 6 s as epoch 3 begins: two epochs are evaluated, the run is still going
    process = subprocess.Popen(local_job_args(tmp_path, claim, env=fault_env("sleep=6@batch=3.1")),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=OUTSIDE)
    process.stdin.write(manifests)
    process.stdin.close()
    scrapes: dict[int, str] = {}
    status_view = ""
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline and len(scrapes) < 2:
        time.sleep(0.3)
        try:
            status = json.loads((tmp_path / "root" / "status.json").read_text())  # the live one
        except (OSError, ValueError):
            continue
        for record in status.get("pods") or []:
            text = _scrape(record["ports"]["metrics"]) if record["phase"] == "Running" else None
            # an epoch is done: every gauge has a value (index 0's checkpoint is written beside the training)
            if text and "indexed_trainer_evaluation" in text and \
                    (record["index"] != 0 or "indexed_trainer_last_checkpoint_step" in text):
                scrapes.setdefault(record["index"], text)
                if record["index"] == 0 and not status_view:
                    status_view = subprocess.run([str(BIN / "local-job"), "status", "--volume-root",
                                                  str(tmp_path / "root")], capture_output=True, text=True,
                                                 timeout=30).stdout
    log = process.stdout.read().decode()
    assert process.wait(timeout=300) == 0, log[-4000:]
    assert set(scrapes) == {0, 1}, log[-3000:]
    for index, text in scrapes.items():
        families = {family.name: family for family in text_string_to_metric_families(text)}
        values = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                  for family in families.values() for sample in family.samples}
        assert values[("indexed_trainer_epochs_planned", ())] == 4
        steps = values[("indexed_trainer_steps_planned", ())]
        assert 0 < values[("indexed_trainer_step", ())] <= steps and steps == 4 * (1024 // 2 // 16)
        assert 1 <= values[("indexed_trainer_epoch", ())] <= 4
        assert 0 <= values[("indexed_trainer_evaluation", (("metric", "accuracy"),))] <= 1
        assert values[("indexed_trainer_throughput_per_second", (("unit", "samples"),))] > 0
        # the synthetic digits are learnt fast: a mini-batch loss may round to 0.0 in float32
        assert values[("indexed_trainer_loss", ())] >= 0 and values[("indexed_trainer_eta_seconds", ())] >= 0
        assert values[("indexed_trainer_peak_memory_bytes", (("device", "cpu"),))] > 50 * 2**20
        assert values[("indexed_trainer_restarts", ())] == 0
        assert families["indexed_trainer_step"].type == "gauge"
        if index == 0:  # rank 0 writes (and reports) the checkpoints
            assert values[("indexed_trainer_last_checkpoint_step", ())] % (1024 // 2 // 16) == 0
            assert abs(values[("indexed_trainer_last_checkpoint_timestamp_seconds", ())] - time.time()) < 600
    assert "index 0's live metrics: step " in status_view and "accuracy" in status_view, status_view
    assert "Rank 0: metrics: serving http://127.0.0.1:" in log  # local-job: the loopback only


def test_a_program_of_ones_own_publishes_through_the_runtime(tmp_path):
    program = tmp_path / "mine.py"
    program.write_text(
        "import time\n"
        "from pathlib import Path\n"
        "from trainer_runtime.metrics import live\n"
        "m = live()\n"
        f"m.started(0, output_dir=Path({str(tmp_path / 'out')!r}))\n"
        "m.progress(30, steps=100, epoch=1, epochs=2); m.loss(0.5); m.evaluation('f1', 0.8)\n"
        "m.throughput(1200.0, 'tokens'); m.checkpoint(30)\n"
        "print('ready', flush=True); time.sleep(30)\n")
    port = _free_port()
    process = subprocess.Popen([str(BIN / "python"), str(program)], stdout=subprocess.PIPE, text=True, cwd=OUTSIDE,
                               env={"PATH": "/usr/bin:/bin", metrics.PORT_VARIABLE: str(port)})
    try:
        assert process.stdout.readline().endswith(f"metrics: serving http://0.0.0.0:{port}/metrics (Prometheus' "
                                                  "format)\n")
        assert process.stdout.readline() == "ready\n"
        line = metrics.summary(metrics.parse(_scrape(port) or ""))
        assert line.startswith("step 30/100 (epoch 1/2), loss 0.5000, f1 0.8, 1200 tokens/s, about ")
        assert "last checkpoint step 30 (0 s ago), 0 restarts, peak memory" in line
    finally:
        process.kill()
        process.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_after_a_fault_the_live_metrics_and_the_status_view_say_what_it_cost(tmp_path):
    """A worker of pod 1 killed after epoch 1's checkpoint: the round restarts in place, rank 0 accounts for the
    fault, and index 0's scrape and `local-job status` carry the goodput, the fault by kind and its seconds by
    phase (docs/metrics.md shows this run's scrape)."""
    claim = volume(tmp_path, SMALL)
    manifests = gen_manifests("replicas=2", "config_map={EPOCHS: '4', LOG_INTERVAL: '2', BATCH_SIZE: '16'}")
    faults = "sigkill@batch=2.3,rank=1,attempt=0; sleep=8@batch=3.1"  # then a pause to scrape in
    process = subprocess.Popen(local_job_args(tmp_path, claim, env=fault_env(faults)), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=OUTSIDE)
    process.stdin.write(manifests)
    process.stdin.close()
    scrape, status_view = None, ""
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline and scrape is None:
        time.sleep(0.3)
        try:
            status = json.loads((tmp_path / "root" / "status.json").read_text())
        except (OSError, ValueError):
            continue
        for record in status.get("pods") or []:
            text = _scrape(record["ports"]["metrics"]) if record["index"] == 0 and record["phase"] == "Running" \
                else None
            if text and "indexed_trainer_goodput_ratio" in text and "indexed_trainer_faults" in text:
                scrape = text
                status_view = subprocess.run([str(BIN / "local-job"), "status", "--volume-root",
                                              str(tmp_path / "root")], capture_output=True, text=True,
                                             timeout=30).stdout
    log = process.stdout.read().decode()
    assert process.wait(timeout=300) == 0, log[-4000:]
    assert scrape is not None, log[-3000:]
    print(scrape)  # docs/metrics.md's
    samples = metrics.parse(scrape)
    assert samples['faults{kind="worker failed"}'] == 1
    assert 0 < samples["goodput_ratio"] < 1
    phases = {name: value for name, value in samples.items() if name.startswith("fault_seconds{")}
    assert set(phases) == {f'fault_seconds{{phase="{phase}"}}' for phase in ("detect", "restart", "restore",
                                                                           "recompute")}
    assert samples['failed_rounds{counted="false"}'] == 1 and samples['failed_rounds{counted="true"}'] == 0
    line = next(line for line in status_view.splitlines() if line.startswith("index 0's live metrics:"))
    assert "failed rounds: 0 counted (0 in a row of 3 allowed), 1 after progress not counted" in line
    assert re.search(r"goodput \d+% \(1 fault, [\d.]+ s lost\)", line), line
    assert re.search(r"Rank 0: fault 1: worker failed \(exit 137\) in round 1; [\d.]+ s lost", log)
