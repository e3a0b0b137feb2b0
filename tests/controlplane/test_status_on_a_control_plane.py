"""`./run.sh --status` against the real kube-scheduler: a Job whose pod asks for more GPUs than any Node has (the fake
Nodes have 8 each) stays Pending as Unschedulable, and the status view says so with the values key to change.
Skipped without $KUBE_ASSETS (see cluster.py)."""

import json
import os
import re
import subprocess
import time

import pytest

from tests.conftest import BIN
from tests.rendering import gen_manifests

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def bound_claim(plane, namespace: str, name: str) -> None:
    """A claim the scheduler takes as bound (spec.volumeName and the bind-completed annotation, as the volume
    binder leaves it; this control plane runs no such controller) to a hostPath volume: so that the pod's resources,
    not its volume, are what the scheduler weighs."""
    volume = f"{namespace}-{name}"
    plane.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "hostPath": {"path": "/tmp/unused"}, "persistentVolumeReclaimPolicy": "Retain",
                 "claimRef": {"namespace": namespace, "name": name}}}))
    plane.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
                 "volumeName": volume, "storageClassName": ""}}))


def test_a_pod_asking_for_more_gpus_than_any_node_has_is_said_to_be_unschedulable(control_plane):
    namespace = "waiting-gpus"
    control_plane.kubectl("create", "namespace", namespace)
    bound_claim(control_plane, namespace, "gpu-claim")
    stream = gen_manifests("replicas=1", "resources.gpu.accelerator_count=16", "shared_volume.existing_claim=gpu-claim",
                           namespace=namespace).decode()
    control_plane.kubectl("apply", "-f", "-", stdin=stream)
    deadline, pods = time.monotonic() + 90, []
    while time.monotonic() < deadline:
        pods = control_plane.get("-n", namespace, "pods", "-l", "batch.kubernetes.io/job-name=mnist-train")["items"]
        conditions = [c for pod in pods for c in (pod.get("status") or {}).get("conditions") or []]
        if any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"no pod was found Unschedulable in 90 s: {json.dumps(pods)[-3000:]}")
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    result = subprocess.run([str(BIN / "python"), "-m", "status_views.kubernetes", namespace, "mnist-train"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    waiting = [line for line in result.stdout.splitlines() if line.startswith("waiting: ")]
    assert len(waiting) == 1 and re.fullmatch(
        r"waiting: index 0 pod mnist-train-0-\w+ Pending: unschedulable: 0/\d+ nodes are available: \d+ Insufficient "
        r"nvidia\.com/gpu: lower resources\.gpu\.accelerator_count \(16\) or add nodes with that many free GPUs "
        r"\(nvidia\.com/gpu\)", waiting[0]), result.stdout
