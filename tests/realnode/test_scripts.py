"""The README's scripts against the real node, from a fresh clone, as a user with this cluster's kubeconfig types
them: `./prepare.sh --values FILE && ./run.sh` submits the Job, `./run.sh --status` shows its pods, index 0's
progress and its live metrics (read through the API server's pod proxy, the pod serving them), then its Complete
condition, and `./clean.sh` deletes the Job, its pods, the Service and the ConfigMaps and keeps the volume."""

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import BIN, ROOT
from tests.realnode.jobs import NAME, pod_of_index, values, volume, wait_finished, wait_for, wait_in_log

pytestmark = [pytest.mark.realnode, pytest.mark.slow]
EPOCHS = 15  # 4 s each here: a minute for ./run.sh --status to find the pods Running


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_the_readme_scripts_submit_show_and_clean_up_the_job(node, worker_image, namespace, tmp_path):
    name, workdir = namespace
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    values_file = workdir / "values.json"
    values_file.write_text(json.dumps(values(name, worker_image, EPOCHS=EPOCHS)))
    volume(node, name, workdir / "volume")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "KUBECONFIG": str(node.plane.kubeconfig)}
    env.pop("BUILD_DIR", None)

    def script(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=180)

    submitted = script(f"./prepare.sh --values {values_file} && ./run.sh")
    assert submitted.returncode == 0, submitted.stderr
    assert f"run.sh: Job {name}/{NAME} submitted" in submitted.stderr, submitted.stderr
    leader = wait_for(lambda: pod_of_index(node, name, 0, running=True), "index 0 Running", 300)["metadata"]["name"]
    wait_in_log(node, name, leader, "Rank 0: epoch: 1/")

    def live_status():
        shown = script("./run.sh --status")
        assert shown.returncode == 0, shown.stderr
        return shown.stdout if "index 0's live metrics: " in shown.stdout else None
    running = wait_for(live_status, "live metrics in ./run.sh --status", 120, every=1)
    assert running.startswith(f"Job {name}/{NAME}: Running; 2 active, 0 succeeded, 0 failed"), running
    assert re.search(rf"^index 0: {NAME}-0-\S+ Running for \d+ s", running, re.M), running
    assert re.search(r"^index 1: \S+ Running", running, re.M), running
    assert re.search(rf"^index 0's latest progress: Rank 0: epoch:? \d+/{EPOCHS}", running, re.M), running

    assert wait_finished(node, name) == "Complete"
    done = script("./run.sh --status")
    assert re.search(rf"^index 0: {NAME}-0-\S+ Succeeded, exit 0 after ", done.stdout, re.M), done.stdout
    # index 0's success completes the Job (the successPolicy); index 1, ending a moment later, succeeded first, or
    # was terminated by the controller as it ended (SIGTERM) and deleted: which one is timing, the view says which
    head = re.match(rf"Job {name}/{NAME}: Complete; 0 active, ([12]) succeeded, 0 failed", done.stdout)
    assert head, done.stdout
    index_1 = re.search(r"^index 1: (.*)$", done.stdout, re.M)[1]
    assert re.match(rf"{NAME}-1-\S+ (Succeeded, exit 0|Failed, exit 143) after ", index_1) \
        or index_1 == "no pod left (a Job that met its successPolicy has its running pods deleted)", done.stdout

    cleaned = script("./clean.sh")
    assert cleaned.returncode == 0, cleaned.stderr
    left = node.get("-n", name, "jobs,services,configmaps,pods,persistentvolumeclaims")["items"]
    kinds = {(item["kind"], item["metadata"]["name"]) for item in left
             if item["metadata"]["name"] != "kube-root-ca.crt"}  # the namespace's own
    assert kinds == {("PersistentVolumeClaim", f"{NAME}-data")}, kinds  # the volume keeps data and checkpoints
