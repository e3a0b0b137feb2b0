"""How local-job ends a Job whose successPolicy is met while another index still runs, as the controller and a
kubelet do: the deletion lands no sooner than the kubelet's relist, so a pod that ends on its own just after the
index that ended the Job (a torchrun follower leaving its exit barrier) counts as it ended; one still running is
terminated and counts neither way. The pods run a plain program (no torchrun), so the timing is the test's."""

import json
import subprocess
import textwrap

import pytest
import yaml

from tests.conftest import BIN, OUTSIDE
from tests.rendering import gen_manifests

pytestmark = pytest.mark.slow

PROGRAM = textwrap.dedent('''
    import os, pathlib, signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    marker = pathlib.Path(os.environ["PLAN_DIR"]) / "index-0-done"
    if os.environ["JOB_COMPLETION_INDEX"] == "0":
        time.sleep(1)
        marker.write_text("done")
        sys.exit(0)
    while not marker.exists():
        time.sleep(0.01)
    if sys.argv[1] == "runs-on":
        while True:
            time.sleep(1)
    time.sleep(0.2)  # a follower's exit, a moment after the leader's
    sys.exit(0)
''')


@pytest.mark.parametrize("follower, succeeded, completed, follower_phase", [
    ("ends-just-after", 2, "0,1", "Succeeded"),
    ("runs-on", 1, "0", "Failed"),  # terminated by the Job's end: exit 143, not counted as failed
])
def test_a_pod_ending_as_the_success_lands_counts_as_it_ended(follower, succeeded, completed, follower_phase,
                                                               tmp_path):
    documents = list(yaml.safe_load_all(gen_manifests("replicas=2", "entrypoint.module=null",
                                                      "entrypoint.script=program.py", "resources.cpu=1",
                                                      "resources.memory=1", "shm_size=0.25",
                                                      "termination_grace_period_seconds=5")))
    job = next(document for document in documents if document["kind"] == "Job")
    worker = job["spec"]["template"]["spec"]["containers"][0]
    worker["command"], worker["args"] = ["python", "program.py", follower], []
    (tmp_path / "job.yaml").write_text(yaml.safe_dump_all(documents))
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "program.py").write_text(PROGRAM)
    (tmp_path / "volume").mkdir()
    result = subprocess.run(
        [str(BIN / "local-job"), str(tmp_path / "job.yaml"), "--image-dir", str(tmp_path / "image"),
         "--volume-root", str(tmp_path / "root"), "--volume", f"mnist-train-data={tmp_path / 'volume'}",
         "--status-file", str(tmp_path / "status.json"), "--env", f"PLAN_DIR={tmp_path / 'volume'}"],
        capture_output=True, text=True, cwd=OUTSIDE, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    status = json.loads((tmp_path / "status.json").read_text())
    assert [(c["type"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("SuccessCriteriaMet", "SuccessPolicy", "Matched rules at index 0"),
        ("Complete", "SuccessPolicy", "Matched rules at index 0")]
    assert (status["succeeded"], status.get("failed", 0), status["completedIndexes"]) == (succeeded, 0, completed)
    assert [pod["phase"] for pod in status["pods"] if pod["index"] == 1] == [follower_phase]
