"""The project's MNIST Job on the real node, submitted as a user submits it (`gen-manifests --values FILE |
kubectl apply -f -`), and the waits and reads the tests make on it: every wait polls the API for an event."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.realnode.node import RealNode

NAME = "mnist-train"  # the default values' name


def values(namespace: str, image: str, **config_map) -> dict:
    """The default job, with what this node needs: the imported image (never pulled: no registry), requests a
    2-core node holds twice, the MNIST sample (no network) and a short run."""
    return {"namespace": namespace, "image": image, "image_pull_policy": "Never",
            "resources": {"cpu": 1, "memory": 3},
            "config_map": {"MNIST_SAMPLE_FALLBACK": True, "EPOCHS": 2, **config_map}}


def volume(node: RealNode, namespace: str, directory: Path, name: str = NAME, volume_name: str | None = None) -> Path:
    """A hostPath PersistentVolume (ReadWriteMany) bound in advance to the claim rendered for job `name` (no
    provisioner here), its directory owned by the pods' user (fsGroup does not apply to hostPath); the volume is
    `<volume_name>-data`, by default `<namespace>-data` (the namespace fixture deletes that one)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    shutil.chown(directory, 10001, 10001)
    node.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{volume_name or namespace}-data"},
        "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "hostPath": {"path": str(directory), "type": "Directory"},
                 "claimRef": {"namespace": namespace, "name": f"{name}-data"}}}))
    return directory


def submit(node: RealNode, values_file: Path) -> str:
    """`gen-manifests --values FILE | kubectl apply -f -`, as the README's user types it; kubectl's output."""
    command = (f"set -o pipefail; {Path(sys.executable).with_name('gen-manifests')} --values {values_file} "
               f"| kubectl --kubeconfig {node.plane.kubeconfig} apply -f -")
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def wait_for(check, what: str, timeout: float = 300, every: float = 0.5):
    """check()'s first truthy answer, polled; TimeoutError naming `what` if none comes in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = check()
        if answer:
            return answer
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout} s")


def job(node: RealNode, namespace: str, name: str = NAME) -> dict:
    return node.get("-n", namespace, "job", name)


def finished(node: RealNode, namespace: str, name: str = NAME) -> str | None:
    """Complete or Failed once the Job has that condition, else None."""
    for condition in job(node, namespace, name).get("status", {}).get("conditions", []):
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return condition["type"]
    return None


def pods(node: RealNode, namespace: str) -> list[dict]:
    """The Job's pods, oldest first."""
    items = node.get("-n", namespace, "pods", "-l", f"batch.kubernetes.io/job-name={NAME}")["items"]
    return sorted(items, key=lambda pod: pod["metadata"]["creationTimestamp"])


def pod_of_index(node: RealNode, namespace: str, index: int, running: bool = False) -> dict | None:
    """The newest pod of completion index `index` (Running, if asked)."""
    found = [pod for pod in pods(node, namespace)
             if pod["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == str(index)
             and (not running or pod["status"].get("phase") == "Running")]
    return found[-1] if found else None


def log(node: RealNode, namespace: str, pod: str, container: str = "worker") -> str:
    return node.kubectl("-n", namespace, "logs", pod, "-c", container, check=False).stdout


def wait_in_log(node: RealNode, namespace: str, pod: str, text: str, timeout: float = 300) -> str:
    """The pod's log once it holds `text`."""
    return wait_for(lambda: (lambda got: got if text in got else None)(log(node, namespace, pod)),
                    f"{text!r} in {pod}'s log", timeout, every=1)


def wait_finished(node: RealNode, namespace: str, timeout: float = 600, name: str = NAME) -> str:
    return wait_for(lambda: finished(node, namespace, name), f"job {namespace}/{name} finished", timeout, every=1)


def run_job(node: RealNode, namespace: str, workdir: Path, image: str, **config_map) -> tuple[dict, Path]:
    """The job's values written and submitted; those values and its volume's directory."""
    chosen = values(namespace, image, **config_map)
    values_file = workdir / "values.json"
    values_file.write_text(json.dumps(chosen))
    claim = volume(node, namespace, workdir / "volume")
    submit(node, values_file)
    return chosen, claim


def follow(node: RealNode, namespace: str, index: int) -> tuple[dict, subprocess.Popen]:
    """Index `index`'s pod once Running, and `kubectl logs -f` of its worker: its whole log even if the Job
    deletes the pod when it ends (a follower still running when index 0 succeeds is terminated)."""
    pod = wait_for(lambda: pod_of_index(node, namespace, index, running=True), f"index {index} Running", 300)
    stream = subprocess.Popen(["kubectl", "--kubeconfig", str(node.plane.kubeconfig), "-n", namespace, "logs",
                               "-f", pod["metadata"]["name"], "-c", "worker"], stdout=subprocess.PIPE, text=True)
    return pod, stream


def followed(stream: subprocess.Popen, timeout: float = 120) -> str:
    """The followed log, once its container has ended."""
    return stream.communicate(timeout=timeout)[0]
