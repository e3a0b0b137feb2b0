"""A node lost whole, on the real controllers: the node lifecycle controller marks it unreachable once its kubelet
stops renewing its lease, the taint eviction controller deletes the gang's pod there (DisruptionTarget), and the Job
controller does not replace it while its end is unconfirmed (podReplacementPolicy: Failed, which the rendered
podFailurePolicy requires): `./run.sh --status` says so and what to do. Marking the node out of service, as that
line says, has the pod garbage collector end the pod, and the Job gives its index a new pod, uncounted. Its own
control plane (these controllers mark every fake Node that no kubelet keeps alive unreachable). Skipped without
$KUBE_ASSETS (see cluster.py)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from datetime import datetime, timezone

import pytest

from status_views.waiting import OUT_OF_SERVICE_TAINT
from tests.conftest import BIN
from tests.controlplane.cluster import CONTROLLERS, ControlPlane, assets_dir
from tests.controlplane.test_status_on_a_control_plane import bound_claim
from tests.rendering import gen_manifests

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]
NAMESPACE, JOB = "node-lost", "mnist-train"
# The controllers a node's loss goes through, and how soon they act (defaults: 50 s of silence, 5 s checks)
NODE_CONTROLLERS = (*CONTROLLERS, "node-lifecycle-controller", "taint-eviction-controller",
                    "pod-garbage-collector-controller")
NODE_GRACE_SECONDS = 8


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kubelets:
    """What a live node's kubelet does for the node lifecycle controller: renew its Lease (kube-node-lease) every
    second. A node taken out of ``alive`` falls silent."""

    def __init__(self, plane: ControlPlane, nodes: list[str]):
        self.plane, self.alive = plane, set(nodes)
        self.stopped = threading.Event()
        for node in nodes:
            plane.kubectl("apply", "-f", "-", stdin=json.dumps(self._lease(node)))
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    @staticmethod
    def _lease(node: str) -> dict:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": iso(time.time())}}

    def _beat(self) -> None:
        while not self.stopped.wait(1.0):
            for node in sorted(self.alive):
                self.plane.kubectl("-n", "kube-node-lease", "patch", "lease", node, "--type=merge", "-p",
                                   json.dumps({"spec": {"renewTime": iso(time.time())}}), check=False)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


@pytest.fixture
def plane(tmp_path):
    assets, why_not = assets_dir()
    if assets is None:
        pytest.skip(why_not)
    plane = ControlPlane(assets, tmp_path / "control-plane")
    try:
        yield plane.start(nodes=2, controllers=NODE_CONTROLLERS, controller_args=(
            f"--node-monitor-grace-period={NODE_GRACE_SECONDS}s", "--node-monitor-period=1s"))
    finally:
        plane.stop()


def pods(plane: ControlPlane) -> list[dict]:
    return plane.get("-n", NAMESPACE, "pods", "-l", f"batch.kubernetes.io/job-name={JOB}")["items"]


def index_of(pod: dict) -> int:
    return int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])


def wait_for(what: str, check, timeout: float, plane: ControlPlane):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:g} s: {what}; pods: {json.dumps(pods(plane))[-4000:]}")


def status_lines(plane: ControlPlane) -> list[str]:
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    result = subprocess.run([str(BIN / "python"), "-m", "status_views.kubernetes", NAMESPACE, JOB],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_index_0s_node_lost_is_replaced_only_once_marked_out_of_service_and_the_status_says_so(plane, tmp_path):
    kubelets = Kubelets(plane, ["node-0", "node-1"])
    try:
        plane.kubectl("create", "namespace", NAMESPACE)
        bound_claim(plane, NAMESPACE, "claim")
        # the toleration cuts the default 300 s before an unreachable node's pods are evicted to 1 s; the grace
        # period, how long past its deletion a pod may take to end, to 10 s
        plane.kubectl("apply", "-f", "-", stdin=gen_manifests(
            "replicas=2", "shared_volume.existing_claim=claim", "termination_grace_period_seconds=10",
            "tolerations=[{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, "
            "tolerationSeconds: 1}]", namespace=NAMESPACE).decode())
        bound = wait_for("both pods bound to a node", lambda: (
            found if len(found := [p for p in pods(plane) if p["spec"].get("nodeName")]) == 2 else None), 90, plane)
        for pod in bound:  # as each node's kubelet reports them
            plane.set_pod_status(NAMESPACE, pod["metadata"]["name"], {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"}]})
        first = next(p for p in bound if index_of(p) == 0)
        lost = first["spec"]["nodeName"]
        kubelets.alive.discard(lost)  # index 0's node falls silent

        evicted = wait_for(f"index 0's pod deleted from unreachable {lost}", lambda: next(
            (p for p in pods(plane) if p["metadata"]["uid"] == first["metadata"]["uid"]
             and p["metadata"].get("deletionTimestamp")), None), 90, plane)
        node = plane.get("node", lost)
        assert any(t["key"] == "node.kubernetes.io/unreachable" and t["effect"] == "NoExecute"
                   for t in node["spec"].get("taints") or []), node["spec"]
        disruption = {c["type"]: c for c in evicted["status"]["conditions"]}["DisruptionTarget"]
        assert disruption["status"] == "True" and disruption["reason"] == "DeletionByTaintManager", disruption

        # past its grace period and the view's margin, still there and not replaced: the Job waits on its end
        deadline = datetime.fromisoformat(evicted["metadata"]["deletionTimestamp"].replace("Z", "+00:00"))
        time.sleep(max(0.0, deadline.timestamp() + 16 - time.time()))
        now = pods(plane)
        assert [p["metadata"]["uid"] for p in now if index_of(p) == 0] == [first["metadata"]["uid"]], now
        assert plane.get("-n", NAMESPACE, "job", JOB)["status"].get("failed", 0) == 0
        lines = status_lines(plane)
        name = first["metadata"]["name"]
        assert f"index 0: {name} Running, Terminating" in " ".join(lines), lines
        waiting = [line for line in lines if line.startswith("waiting: ")]
        # a line for each pod the node held (the scheduler spreads the two, but nothing in the Job requires it)
        assert len(waiting) == sum(p["spec"]["nodeName"] == lost for p in bound), lines
        assert waiting[0].startswith(f"waiting: index 0 pod {name} Terminating: its end is unconfirmed "), lines
        assert f"(DisruptionTarget DeletionByTaintManager): node {lost}'s kubelet does not answer" in waiting[0]
        command = f"kubectl taint nodes {lost} {OUT_OF_SERVICE_TAINT}"
        assert command in waiting[0], waiting

        # what the line says to do, done: the pod garbage collector ends the pod (it checks every 20 s) as a
        # disruption, and the Job gives index 0 a new pod, uncounted
        plane.kubectl(*command.split()[1:])
        replacement = wait_for("a new pod for index 0", lambda: next(
            (p for p in pods(plane) if index_of(p) == 0 and p["metadata"]["uid"] != first["metadata"]["uid"]),
            None), 90, plane)
        assert replacement["spec"].get("nodeName") in (None, "node-0", "node-1")
        job = plane.get("-n", NAMESPACE, "job", JOB)
        assert job["status"].get("failed", 0) == 0, job["status"]  # the podFailurePolicy ignored a disruption
        assert not [line for line in status_lines(plane) if "its end is unconfirmed" in line]
    finally:
        kubelets.stop()
