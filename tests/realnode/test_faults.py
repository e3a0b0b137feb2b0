"""Faults on the real node: a worker process killed inside its pod restarts in place (the same pods), a deleted
pod's replacement resumes from the checkpoint its gang wrote on SIGTERM, an eviction through the Eviction API and a
preemption by the scheduler are not counted against the Job (their DisruptionTarget condition, the
podFailurePolicy's Ignore rule), and values a hand edit broke fail the Job at once (exit 78, FailJob)."""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import BIN, OUTSIDE
from tests.controlplane.scenarios import (
    DELETED_AND_REPLACED,
    DISRUPTED_AND_REPLACED,
    POD_NAME,
    RESTARTED_IN_PLACE,
    comparable,
    fault_outcome,
)
from tests.realnode.jobs import (
    NAME,
    job,
    log,
    pod_of_index,
    pods,
    run_job,
    values,
    volume,
    wait_finished,
    wait_for,
    wait_in_log,
)

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
    status = job(node, name)["status"]
    assert fault_outcome(status) == RESTARTED_IN_PLACE, status  # as local-job's in-place rounds end

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
    status = job(node, name)["status"]
    assert fault_outcome(status) == DELETED_AND_REPLACED, status  # no condition: counted, as local-job's delete ends
    resumed = log(node, name, replacement["metadata"]["name"]) or resumed
    assert "epoch 1/4, test accuracy" not in resumed.split("resuming from ckpt-")[1]  # epoch 1 not redone


def disruption_of(node, namespace: str, pods_: list[dict]) -> tuple[dict, dict]:
    """The first of `pods_` the DisruptionTarget condition marks, and that condition (the pod object as it was
    then: the scheduler may pick either of the gang's pods)."""
    def disrupted():
        for pod in pods_:
            listed = node.kubectl("-n", namespace, "get", "pod", pod["metadata"]["name"], "-o", "json", check=False)
            conditions = json.loads(listed.stdout)["status"].get("conditions", []) if listed.returncode == 0 else []
            found = next((c for c in conditions if c["type"] == "DisruptionTarget" and c["status"] == "True"), None)
            if found:
                return pod, found
        return None
    return wait_for(disrupted, "a DisruptionTarget condition on the gang's pods", 60, every=0.2)


def replaced_and_resumed_uncounted(node, name: str, leader: str, victim: dict) -> None:
    """The victim's index gets a new pod, the gang resumes from a checkpoint, and the Job completes with nothing
    counted (the podFailurePolicy ignored the disruption)."""
    index = int(victim["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    wait_for(lambda: (lambda pod: pod and pod["metadata"]["uid"] != victim["metadata"]["uid"])(
        pod_of_index(node, name, index)), f"index {index}'s replacement", 180)
    survivor = leader if index == 1 else pod_of_index(node, name, 0)["metadata"]["name"]
    wait_in_log(node, name, survivor, "resuming from ckpt-")  # the gang resumed with the replacement
    assert wait_finished(node, name) == "Complete"
    status = job(node, name)["status"]
    assert fault_outcome(status) == DISRUPTED_AND_REPLACED, status  # as local-job's eviction ends


def test_an_evicted_pod_is_not_counted(node, worker_image, namespace):
    name, leader_pod = past_the_first_checkpoint(node, namespace, worker_image)
    victim = pod_of_index(node, name, 1)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": victim["metadata"]["name"], "namespace": name}}
    node.kubectl("create", "--raw", f"/api/v1/namespaces/{name}/pods/{victim['metadata']['name']}/eviction",
                 "-f", "-", stdin=json.dumps(eviction))
    _, condition = disruption_of(node, name, [victim])
    assert condition["reason"] == "EvictionByEvictionAPI", condition
    replaced_and_resumed_uncounted(node, name, leader_pod["metadata"]["name"], victim)


def test_a_pod_preempted_by_a_higher_priority_pod_is_not_counted(node, worker_image, namespace):
    """The job's two pods hold the node's 2 CPUs; a pod of a higher PriorityClass asking for one makes the scheduler
    preempt one of them (DisruptionTarget, PreemptionByScheduler; SIGTERM and the grace period as for a deletion).
    The preemptor runs a few seconds and ends, and the victim's replacement then takes its CPU back."""
    name, leader_pod = past_the_first_checkpoint(node, namespace, worker_image)
    gang = pods(node, name)
    node.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": f"{name}-urgent"},
        "value": 1000}))
    try:
        node.kubectl("-n", name, "apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "urgent"},
            "spec": {"priorityClassName": f"{name}-urgent", "restartPolicy": "Never",
                     "containers": [{"name": "urgent", "image": worker_image, "imagePullPolicy": "Never",
                                     "command": ["python", "-c", "import time; time.sleep(5)"],
                                     "resources": {"requests": {"cpu": "1"}}}]}}))
        victim, condition = disruption_of(node, name, gang)
        assert condition["reason"] == "PreemptionByScheduler", condition
        replaced_and_resumed_uncounted(node, name, leader_pod["metadata"]["name"], victim)
        assert node.get("-n", name, "pod", "urgent")["status"]["phase"] == "Succeeded"
    finally:
        node.kubectl("delete", "priorityclass", f"{name}-urgent", check=False)


@pytest.mark.parametrize("variable, value, container, said", [
    # gen-manifests refuses both; a hand-edited ConfigMap reaches the node
    ("EPOCHS", "abc", "check-config", "EPOCHS: 'abc' must be a whole number"),
    ("OUTPUT_DIR", "/results", "worker", "OUTPUT_DIR=/results: / is on a read-only filesystem"),
], ids=["epochs", "output-dir"])
def test_values_a_hand_edit_broke_fail_the_job_at_once(node, worker_image, namespace, variable, value, container,
                                                       said):
    """A value the pod refuses (check-config: EPOCHS=abc; the launcher, before the rendezvous: an OUTPUT_DIR outside
    the volume, on the read-only root) exits 78: the podFailurePolicy's FailJob ends the Job at its first pod, the
    kubelet keeps the container's error as its termination message, and the status view (`./run.sh --status`) says
    which container failed and why."""
    name, workdir = namespace
    values_file = workdir / "values.json"
    values_file.write_text(json.dumps(values(name, worker_image)))
    volume(node, name, workdir / "volume")
    documents = list(yaml.safe_load_all(subprocess.run(
        [str(BIN / "gen-manifests"), "--values", str(values_file)], capture_output=True, check=True).stdout))
    next(d for d in documents if d["kind"] == "ConfigMap")["data"][variable] = value
    node.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
    assert wait_finished(node, name, timeout=180) == "Failed"
    condition = next(c for c in job(node, name)["status"]["conditions"] if c["type"] == "Failed")
    assert condition["reason"] == "PodFailurePolicy", condition
    assert f"Container {container} for pod" in condition["message"] and "exit code 78" in condition["message"]
    refused = [status for pod in pods(node, name) for status in
               pod["status"].get("initContainerStatuses", []) + pod["status"].get("containerStatuses", [])
               if status["name"] == container and (status["state"].get("terminated") or {}).get("exitCode") == 78]
    assert refused and all(said in status["state"]["terminated"]["message"] for status in refused), refused
    shown = subprocess.run([str(BIN / "python"), "-m", "status_views.kubernetes", name, NAME], capture_output=True,
                           text=True, env={**os.environ, "KUBECONFIG": str(node.plane.kubeconfig)}, cwd=OUTSIDE,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"Job {name}/{NAME}: Failed;"), shown.stdout
    where = " in check-config" if container == "check-config" else ""
    last = re.search(r"^last error: \S+ exit 78(.*?) \(bad configuration[^)]*\): (.*)$", shown.stdout, re.M)
    assert last and last.group(1) == where and said in last.group(2), shown.stdout

    if variable == "OUTPUT_DIR":  # local-job cannot make a pod's root read-only: there the run would write /results
        return
    # local-job, given the same manifests, reports what the node's Job controller and kubelet did
    local = workdir / "local-job"
    shutil.rmtree(local, ignore_errors=True)
    (local / "volume").mkdir(parents=True)
    shutil.chown(local / "volume", 10001, 10001)  # as the node's volume: the pods' user may write it
    ran = subprocess.run([str(BIN / "local-job"), "-", "--volume-root", str(local / "root"), "--volume",
                          f"{NAME}-data={local / 'volume'}", "--status-file", str(local / "status.json")],
                         input=yaml.safe_dump_all(documents), capture_output=True, text=True, cwd=OUTSIDE, timeout=300)
    assert ran.returncode == 1, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert comparable(json.loads((local / "status.json").read_text())) == comparable(job(node, name)["status"])
    local_view = subprocess.run([str(BIN / "local-job"), "status", "--volume-root", str(local / "root")],
                                capture_output=True, text=True, cwd=OUTSIDE, timeout=60).stdout
    assert seen_alike(local_view) == seen_alike(shown.stdout), (local_view, shown.stdout)
    for view, engine in ((local_view, "local-job"), (shown.stdout, "node")):
        # each pod failed in check-config, by itself (78) or terminated (143) when the Job failed while it still ran
        # there: which of the two depends on timing, on the node as under local-job. On the node the controller
        # deletes a pod it terminated, so once gone its index has no pod left (local-job keeps it: DIFFERENCES)
        exits = re.findall(r"^(?:index \d+: |\s+)\S+ Failed, exit (\d+) in check-config", view, re.M)
        deleted = re.findall(r"^index \d+: no pod left \(a failed Job's running pods are deleted\)$", view, re.M)
        assert "78" in exits and set(exits) <= {"78", "143"}, view
        assert len(exits) + len(deleted) == 2 and (engine == "node" or not deleted), view


def seen_alike(view: str) -> list[str]:
    """A status view's lines as both engines must agree on them: the head line with the counts, the conditions and
    the last error; pod names, durations and the message after the code's meaning aside (on the node a read-only
    root, on this machine a directory of root's: the same refusal in other words)."""
    lines = []
    for line in view.splitlines():
        line = re.sub(r" after \d+( min \d+)? s", "", POD_NAME.sub("<pod>", line))
        if line.startswith(("Job ", "  ", "last error: ")):
            lines.append(re.sub(r"(\(bad configuration[^)]*\)): .*", r"\1", line))
    return lines
