"""./run.sh --scale N on a real kube-apiserver and Job controller: the rendered Job of replica groups (the render
tests' replica-groups values: 3 groups, min_replicas 2, max_replicas 6) takes the patch generator/scale.py makes
(completions, parallelism and maxFailedIndexes together: an Elastic Indexed Job), the controller creates pods for
the new indexes and deletes those of the indexes scaled away; a count outside the job's bounds is refused before
anything is sent. Skipped without $KUBE_ASSETS (see cluster.py)."""

import json
import time

import pytest

from tests.generator.test_render import MATRIX
from tests.generator.test_scripts import script

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

NAMESPACE = "scale-groups"


def live_indexes(plane) -> set[int]:
    """The completion indexes of the Job's pods not being deleted."""
    pods = plane.get("-n", NAMESPACE, "pods", "-l", "batch.kubernetes.io/job-name=mnist-groups")["items"]
    return {int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]) for pod in pods
            if not pod["metadata"].get("deletionTimestamp")}


def settle(plane, wanted: set[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while live_indexes(plane) != wanted:
        assert time.monotonic() < deadline, f"the Job's pods {sorted(live_indexes(plane))}, not {sorted(wanted)}"
        time.sleep(0.5)


def test_run_sh_scale_grows_and_shrinks_the_running_job_of_replica_groups(control_plane, tmp_path, monkeypatch):
    build = tmp_path / "build"
    sets = [part for item in MATRIX["replica-groups"] + [f"namespace={NAMESPACE}"] for part in ("--set", item)]
    assert script("prepare.sh", *sets, build=build).returncode == 0
    control_plane.kubectl("create", "namespace", NAMESPACE)
    # the values' priority_class_name: without it the API server admits no pod of the Job
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}))
    control_plane.kubectl("apply", "-f", str(build))
    settle(control_plane, {0, 1, 2})
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    grown = script("run.sh", "--scale", "6", build=build)
    assert grown.returncode == 0, grown.stderr
    assert "scaled to 6 replica groups" in grown.stderr
    spec = control_plane.get("-n", NAMESPACE, "job", "mnist-groups")["spec"]
    assert (spec["completions"], spec["parallelism"], spec["maxFailedIndexes"]) == (6, 6, 4)
    settle(control_plane, set(range(6)))
    shrunk = script("run.sh", "--scale", "2", build=build)
    assert shrunk.returncode == 0, shrunk.stderr
    spec = control_plane.get("-n", NAMESPACE, "job", "mnist-groups")["spec"]
    assert (spec["completions"], spec["parallelism"], spec["maxFailedIndexes"]) == (2, 2, 0)
    settle(control_plane, {0, 1})  # the highest indexes' pods deleted, and none made again
    refused = script("run.sh", "--scale", "7", build=build)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
        "scale: 7 groups is outside the job's bounds: from fault_tolerance.min_replicas (2) to "
        "fault_tolerance.max_replicas (6)"), refused.stderr
    assert control_plane.get("-n", NAMESPACE, "job", "mnist-groups")["spec"]["completions"] == 2
