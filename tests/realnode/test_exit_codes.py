"""Every exit code of the contract's table (trainer_contract.exit_codes.CODES), from a program of the user's under
the indexed-trainer launcher, on the real node and under local-job: the kubelet reports the code the program
exited with and the launcher's termination message, the rendered podFailurePolicy acts on it as the code's action
says, and local-job reports what the Job controller reports. One Job per code, all at once: each program
(tests/controlplane/plan.py) exits its code on its index's first pod and 0 on the next (a program of the user's
keeps no run, so the launcher restarts nothing in place and passes the code through; the built-in worker's
in-place rounds are test_faults')."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, OUTSIDE, ROOT_ALLOWANCE
from tests.controlplane.scenarios import comparable
from tests.realnode.jobs import finished, submit, volume, wait_for
from trainer_contract.exit_codes import CODES, action, meaning

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

# The control-plane scenarios' pod program (it counts its index's pods on the volume and follows a plan), on the
# Job's volume: the pods' image holds the product only.
PLAN_SCRIPT = Path(__file__).resolve().parent.parent / "controlplane" / "plan.py"


# What each action makes of one pod ending with its code, max_restarts 1: the Job's end, its reason, the pods
# counted in .status.failed, and how many pods the index had.
OUTCOMES = {
    "done": ("Complete", "SuccessPolicy", 0, 1),
    "free": ("Complete", "SuccessPolicy", 0, 2),  # a victim: ignored, its index gets a replacement
    "leave": ("Complete", "SuccessPolicy", 0, 2),  # a node that keeps failing: ignored, its index gets a new pod
    "retry": ("Complete", "SuccessPolicy", 1, 2),  # counted, within max_restarts: a replacement
    # counted too: a pod that stopped on a SIGTERM of its own has no DisruptionTarget condition to be ignored by
    "stop": ("Complete", "SuccessPolicy", 1, 2),
    "fail": ("Failed", "PodFailurePolicy", 1, 1),  # FailJob at the first pod
}


def job_values(namespace: str, image: str, code: int) -> dict:
    return {"name": f"exit-{code}", "namespace": namespace, "image": image, "image_pull_policy": "Never",
            "replicas": 1, "max_restarts": 1, "resources": {"cpu": 0.25, "memory": 1}, "shm_size": 0.25,
            "entrypoint": {"module": None, "script": "/pvc-home/plan.py", "launcher": "indexed-trainer"},
            "config_map": {"PLAN": json.dumps({"0": [[code, 0], [0, 0]]}), "PLAN_DIR": "/pvc-home"}}


def with_program(directory: Path) -> Path:
    shutil.copy(PLAN_SCRIPT, directory / "plan.py")
    return directory


def run_on_local_job(values_file: Path, volume_dir: Path, root: Path) -> subprocess.Popen:
    manifests = subprocess.run([str(BIN / "gen-manifests"), "--values", str(values_file)], capture_output=True,
                               check=True).stdout
    (root / "job.yaml").write_bytes(manifests)
    return subprocess.Popen(
        [str(BIN / "local-job"), str(root / "job.yaml"), "--volume-root", str(root / "pods"), "--volume",
         f"{json.loads(values_file.read_text())['name']}-data={volume_dir}", "--status-file",
         str(root / "status.json")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=OUTSIDE, env={**os.environ, **ROOT_ALLOWANCE})


def first_pod_ended(node, namespace: str, name: str) -> dict:
    pods = node.get("-n", namespace, "pods", "-l", f"batch.kubernetes.io/job-name={name}")["items"]
    first = min(pods, key=lambda pod: pod["metadata"]["creationTimestamp"])
    return first["status"]["containerStatuses"][0]["state"]["terminated"]


def test_each_exit_code_gets_its_actions_outcome_on_the_node_and_under_local_job(node, worker_image, namespace):
    name, workdir = namespace
    codes = [entry.code for entry in CODES]
    local: dict[int, subprocess.Popen] = {}
    try:
        for code in codes:
            job_dir = workdir / f"exit-{code}"
            job_dir.mkdir(exist_ok=True)
            values_file = job_dir / "values.json"
            values_file.write_text(json.dumps(job_values(name, worker_image, code)))
            with_program(volume(node, name, job_dir / "volume", name=f"exit-{code}", volume_name=f"{name}-{code}"))
            submit(node, values_file)
            local_dir = job_dir / "local"  # afresh: the node's state directory outlives a run, and its counter
            shutil.rmtree(local_dir, ignore_errors=True)
            volume_dir = local_dir / "volume"
            volume_dir.mkdir(parents=True)
            local[code] = run_on_local_job(values_file, with_program(volume_dir), local_dir)
        for code in codes:
            wait_for(lambda code=code: finished(node, name, f"exit-{code}"), f"job exit-{code} finished", 240)
        for code in codes:
            output = local[code].communicate(timeout=240)[0]
            real = node.get("-n", name, "job", f"exit-{code}")["status"]
            end, reason, failed, pods = OUTCOMES[action(code)]
            seen = comparable(real)
            assert seen["conditions"][-1][:2] == (end, reason) and seen["failed"] == failed, (code, seen)
            assert len(node.get("-n", name, "pods", "-l", f"batch.kubernetes.io/job-name=exit-{code}")["items"]) \
                == pods, code
            ended = first_pod_ended(node, name, f"exit-{code}")
            assert ended["exitCode"] == code and ended["message"].startswith(f"exit {code}: {meaning(code)}"), ended
            status = json.loads((workdir / f"exit-{code}" / "local" / "status.json").read_text())
            assert comparable(status) == seen, (code, output[-2000:])
    finally:
        for code in codes:
            if code in local and local[code].poll() is None:
                local[code].kill()
            node.kubectl("delete", "persistentvolume", f"{name}-{code}-data", "--wait=false", check=False)
