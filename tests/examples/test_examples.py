"""examples/, run by local-job exactly as their values files and the README say (real torchrun, gloo)."""

import importlib.util
import json
import os
import re
import signal
import subprocess

import pytest

from tests.conftest import BIN, OUTSIDE, ROOT
from tests.localjob.test_local_job_runs import pod_processes
from tests.worker.launch import read_until

pytestmark = pytest.mark.slow
EXAMPLES = ROOT / "examples"


def render(tmp_path, example: str):
    """`gen-manifests --values examples/EXAMPLE/values.yaml > EXAMPLE.yaml`"""
    manifests = tmp_path / f"{example}.yaml"
    with manifests.open("w") as out:
        subprocess.run([str(BIN / "gen-manifests"), "--values", str(EXAMPLES / example / "values.yaml")], stdout=out,
                       check=True, cwd=OUTSIDE)
    return manifests


def local_job(tmp_path, example: str) -> list[str]:
    """`local-job EXAMPLE.yaml --image-dir examples/EXAMPLE` (with this test's volume root and status file).

    The controller's own back-off (10 s): a replacement started while the old leader still runs can join the
    old rendezvous and wait out join_timeout_seconds (docs/reliability.md); plain torchrun's survivor may
    take a few seconds to fail on a loaded machine."""
    return [str(BIN / "local-job"), str(render(tmp_path, example)), "--image-dir", str(EXAMPLES / example),
            "--volume-root", str(tmp_path / "root"), "--status-file", str(tmp_path / "status.json"),
            "--backoff-seconds", "10"]


def test_toy_ddp_snapshots_on_the_volume_and_resumes_after_a_killed_pod(tmp_path):
    process = subprocess.Popen(local_job(tmp_path, "toy-ddp"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=OUTSIDE, start_new_session=True)
    seen = []
    try:
        assert read_until(process, "Epoch 20 | Training snapshot saved", 240, seen), "".join(seen[-40:])
        for pid in pod_processes("toy-ddp-1-"):  # the node running pod 1 is lost
            os.kill(pid, signal.SIGKILL)
        rest = process.communicate(timeout=300)[0]
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    log = "".join(seen) + rest
    assert process.returncode == 0, log[-5000:]
    resumed = [int(n) for n in re.findall(r"Resuming training from snapshot at Epoch (\d+)", log)]
    assert resumed and min(resumed) >= 20  # the gang came back and went on from the volume's snapshot
    assert "[RANK0] done: 60 epochs" in log and "[RANK1] done: 60 epochs" in log
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["condition"]["type"] == "Complete" and status["restarts"] == {"0": 1, "1": 1}
    assert (tmp_path / "root" / "volumes" / "toy-ddp-data" / "toy-ddp" / "snapshot.pt").exists()


def test_lightning_script_runs_unchanged_on_two_pods(tmp_path):
    if importlib.util.find_spec("lightning") is None:
        if os.environ.get("CI"):  # .ci/run installs the test extra, lightning included
            pytest.fail("lightning is not installed (pip install -e '.[worker,test]')")
        pytest.skip("lightning is not installed (pip install lightning)")
    result = subprocess.run(local_job(tmp_path, "lightning"), capture_output=True, text=True, timeout=400, cwd=OUTSIDE)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    for rank in (0, 1):
        assert re.search(rf"rank {rank} of 2: 2 epochs, train_loss \d\.\d{{4}}", log), log[-3000:]
    assert (tmp_path / "root" / "volumes" / "lightning-ddp-data" / "lightning-ddp" / "final.ckpt").exists()


def test_the_example_values_render_for_a_cluster(tmp_path):
    for example in ("toy-ddp", "lightning"):
        text = render(tmp_path, example).read_text()
        assert '- "torchrun"' in text and "workingDir: \"/app\"" in text
        assert "initContainers:" not in text  # only the built-in worker has a configuration to check
