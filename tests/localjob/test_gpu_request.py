"""A GPU job on a machine without GPUs (this one): by default the Job fails at once with GPU_MISSING (79), not
retried; with resources.gpu.cpu_fallback: true the launcher says so at start in one line and the pods train on the
CPU. local-job's status shows the warning while the Job runs and after."""

import json
import re
import signal
import subprocess

import pytest

from tests.conftest import BIN, OUTSIDE
from tests.localjob.test_local_job_runs import SMALL, local_job_args, run_local_job, volume
from tests.mnist.launch import read_until
from tests.rendering import gen_manifests
from trainer_contract import exit_codes

pytestmark = pytest.mark.slow

WARNING = ("launcher: warning: this pod asked for 1 GPU (resources.gpu.accelerator_count) but sees none: training "
           "on the CPU (set resources.gpu.cpu_fallback: false to fail instead)")


def status(tmp_path) -> list[str]:
    result = subprocess.run([str(BIN / "local-job"), "status", "--volume-root", str(tmp_path / "root")],
                            capture_output=True, text=True, cwd=OUTSIDE, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_pods_say_once_that_they_train_on_the_cpu_and_the_status_shows_it(tmp_path):
    claim = volume(tmp_path, SMALL)
    manifests = gen_manifests("resources.gpu.accelerator_count=1", "resources.gpu.cpu_fallback=true",
                              "config_map.EPOCHS=2", "config_map.BATCH_SIZE=8", "config_map.LOG_INTERVAL=10")
    (tmp_path / "job.yaml").write_bytes(manifests)
    process = subprocess.Popen(local_job_args(tmp_path, claim, source=tmp_path / "job.yaml"), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=OUTSIDE, start_new_session=True)
    seen: list[str] = []
    try:
        assert read_until(process, "Rank 0: epoch: 1/2, batch: 20/", 240, seen), "".join(seen[-40:])
        during = status(tmp_path)
        rest = process.communicate(timeout=300)[0]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
    log = "".join(seen) + rest
    assert process.returncode == 0, log[-4000:]
    # said at start, once per pod, before the rendezvous
    warned = re.findall(rf"^\[mnist-train-(\d)-\w{{5}}\] {re.escape(WARNING)}$", log, re.M)
    assert sorted(warned) == ["0", "1"], log[-3000:]
    assert during[0] == "Job default/mnist-train: Running; 2 active, 0 succeeded, 0 failed (backoffLimit 3)"
    assert any(line.startswith("index 0's latest progress: Rank 0: epoch: 1/2, batch: ") for line in during), during
    assert f"warning: {WARNING.removeprefix('launcher: warning: ')}" in during
    after = status(tmp_path)
    assert after[0].startswith("Job default/mnist-train: Complete;") and f"warning: {WARNING.removeprefix('launcher: warning: ')}" in after
    # the JSON status the run ends with is the one the view read
    assert json.loads((tmp_path / "root" / "status.json").read_text())["condition"]["type"] == "Complete"


def test_by_default_the_job_fails_at_once_and_is_not_retried(tmp_path):
    """No GPU job trains on CPUs unnoticed: resources.gpu.cpu_fallback is false unless the values say true."""
    claim = volume(tmp_path, SMALL)
    result, log, job_status = run_local_job(tmp_path, gen_manifests("resources.gpu.accelerator_count=2"), claim,
                                            timeout=120)
    assert result.returncode == 1, log[-3000:]
    assert job_status["condition"]["reason"] == "PodFailurePolicy"
    assert f"failed with exit code {exit_codes.GPU_MISSING} matching FailJob rule" in job_status["condition"]["message"]
    assert job_status["restarts"] == {"0": 0, "1": 0} and "Rank 0:" not in log  # no training, no replacement
    assert "asked for 2 GPUs (resources.gpu.accelerator_count) but sees none, and resources.gpu.cpu_fallback is false" \
        in log
    lines = status(tmp_path)
    assert lines[0].startswith("Job default/mnist-train: Failed;")
    assert any(line.startswith("last error: mnist-train-") and f"exit {exit_codes.GPU_MISSING} (" in line
               for line in lines), lines
