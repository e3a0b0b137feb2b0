"""Faults on the real node: a worker process killed inside its pod restarts in place (the same pods), a deleted
pod's replacement resumes from the checkpoint its gang wrote on SIGTERM, and an eviction through the Eviction
API is not counted against the Job (its DisruptionTarget condition, the podFailurePolicy's Ignore rule)."""

import json
import re
import subprocess

import pytest

from tests.realnode.jobs import job, log, pod_of_index, pods, run_job, wait_finished, wait_for, wait_in_log

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

# Run inside a worker container: who it runs as, what it may do, and the PIDs of its training processes
# (torchrun gives each LOCAL_RANK; the launcher itself has none).
INSIDE = r"""
import json, os
def environ(pid):
    try:
        return open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return []
workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and any(v.startswith(b"LOCAL_RANK=") for v in environ(p))]
capabilities = [l.split()[1] for l in open("/proc/self/status") if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
try:
    open("/written-by-the-test", "w")
    root_writable = True
except OSError:
    root_writable = False
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "capabilities": capabilities,
                  "root_writable": root_writable, "workers": workers}))
"""


def inside(node, namespace: str, pod: str) -> dict:
    result = node.kubectl("-n", namespace, "exec", pod, "-c", "worker", "--", "python", "-c", INSIDE)
    return json.loads(result.stdout)


def past_the_first_checkpoint(node, namespace, worker_image) -> tuple[str, dict]:
    """The job, 4 epochs, submitted and followed until index 0's pod wrote epoch 1's checkpoint: its namespace (and
    name), index 0's pod."""
    name, workdir = namespace
    run_job(node, name, workdir, worker_image, EPOCHS=4)
    leader = pod_of_index(node, name, 0)
    wait_in_log(node, name, leader["metadata"]["name"], "checkpoint ckpt-e0001-s000000.pt written")
    return name, leader


def test_a_killed_worker_restarts_in_place(node, worker_image, namespace):
    name, leader_pod = past_the_first_checkpoint(node, namespace, worker_image)
    leader = leader_pod["metadata"]["name"]
    follower = pod_of_index(node, name, 1)
    seen = inside(node, name, follower["metadata"]["name"])
    # the running container as the pod spec says: uid 10001, no capability, a read-only root
    assert (seen["uid"], seen["gid"]) == (10001, 10001)
    assert set(seen["capabilities"]) == {"0000000000000000"} and not seen["root_writable"]
    assert len(seen["workers"]) == 1, seen
    before = {pod["metadata"]["uid"] for pod in pods(node, name)}
    node.kubectl("-n", name, "exec", follower["metadata"]["name"], "-c", "worker", "--", "python", "-c",
                 f"import os, signal; os.kill({seen['workers'][0]}, signal.SIGKILL)")
    both = (follower["metadata"]["name"], leader)
    logs = wait_for(lambda: (lambda text: text if "resuming from ckpt-e0001-s000000.pt" in text else None)(
        "".join(log(node, name, pod) for pod in both)), "the gang resumed in the pods' logs", 300, every=1)
    assert "round 1 failed: this pod's worker failed with exit code 137; restarting in place" in logs, logs
    assert "round 2 of the gang: new workers" in logs
    assert {pod["metadata"]["uid"] for pod in pods(node, name)} == before  # restarted in place: no pod recreated
    assert wait_finished(node, name) == "Complete"
    assert job(node, name)["status"].get("failed", 0) == 0

def test_a_deleted_pod_is_replaced_and_resumes(node, worker_image, namespace):
    name, leader = past_the_first_checkpoint(node, namespace, worker_image)
    follower = pod_of_index(node, name, 1)["metadata"]["uid"]
    with subprocess.Popen(["kubectl", "--kubeconfig", str(node.plane.kubeconfig), "-n", name, "logs", "-f",
                           leader["metadata"]["name"], "-c", "worker"], stdout=subprocess.PIPE, text=True) as tail:
        node.kubectl("-n", name, "delete", "pod", leader["metadata"]["name"], "--wait=false")
        last_words = tail.communicate(timeout=120)[0]
    # the gang checkpointed mid-epoch on SIGTERM, within the grace period, and said the exit is not counted
    stopped = re.search(r"stop requested: checkpointing epoch \d+ at batch \d+[\s\S]*?checkpoint (ckpt-\S+) written", last_words)
    assert stopped and "exiting 143" in last_words, last_words
    replacement = wait_for(lambda: (lambda pod: pod if pod and pod["metadata"]["uid"] != leader["metadata"]["uid"]
                                    else None)(pod_of_index(node, name, 0)), "index 0's replacement", 180)
    resumed = wait_in_log(node, name, replacement["metadata"]["name"], f"resuming from {stopped.group(1)}")
    assert pod_of_index(node, name, 1)["metadata"]["uid"] == follower  # the survivor waited in place
    assert wait_finished(node, name) == "Complete"
    resumed = log(node, name, replacement["metadata"]["name"]) or resumed
    assert "epoch 1/4, test accuracy" not in resumed.split("resuming from ckpt-")[1]  # epoch 1 not redone


def test_an_evicted_pod_is_not_counted(node, worker_image, namespace):
    name, leader_pod = past_the_first_checkpoint(node, namespace, worker_image)
    leader = leader_pod["metadata"]["name"]
    victim = pod_of_index(node, name, 1)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": victim["metadata"]["name"], "namespace": name}}
    node.kubectl("create", "--raw", f"/api/v1/namespaces/{name}/pods/{victim['metadata']['name']}/eviction",
                 "-f", "-", stdin=json.dumps(eviction))

    def disrupted():
        listed = node.kubectl("-n", name, "get", "pod", victim["metadata"]["name"], "-o", "json", check=False)
        conditions = json.loads(listed.stdout)["status"].get("conditions", []) if listed.returncode == 0 else []
        return next((c for c in conditions if c["type"] == "DisruptionTarget" and c["status"] == "True"), None)
    condition = wait_for(disrupted, "the DisruptionTarget condition on the evicted pod", 60, every=0.2)
    assert condition["reason"] == "EvictionByEvictionAPI", condition
    wait_for(lambda: (lambda pod: pod and pod["metadata"]["uid"] != victim["metadata"]["uid"])(
        pod_of_index(node, name, 1)), "index 1's replacement", 180)
    wait_in_log(node, name, leader, "resuming from ckpt-")  # the gang resumed with the replacement
    assert wait_finished(node, name) == "Complete"
    status = job(node, name)["status"]
    assert status.get("failed", 0) == 0, status  # the podFailurePolicy ignored the disruption
