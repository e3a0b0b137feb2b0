"""The default MNIST job on a real kubelet, submitted as a user submits it: both pods meet, train, and rank 0
writes the model onto the shared volume, every container as the rendered security context says, which the
runtime's own spec of each container confirms."""

import json

import pytest

from tests.realnode.jobs import NAME, follow, followed, job, pods, run_job, wait_finished

pytestmark = [pytest.mark.realnode, pytest.mark.slow]


def test_the_default_job_completes_with_both_pods_meeting(node, worker_image, namespace):
    name, workdir = namespace
    _, claim = run_job(node, name, workdir, worker_image)
    (leader, first), (_, second) = follow(node, name, 0), follow(node, name, 1)
    assert wait_finished(node, name) == "Complete"
    first, second = followed(first), followed(second)
    status = job(node, name)["status"]
    assert status.get("failed", 0) == 0 and "0" in status.get("completedIndexes", ""), status
    leader = next(pod for pod in pods(node, name) if pod["metadata"]["uid"] == leader["metadata"]["uid"])
    assert leader["status"]["phase"] == "Succeeded"
    assert leader["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert "Rank 0: process group: gloo, world size 2 (2 nodes x 1)" in first, first
    assert "Rank 0: epoch 2/2, test accuracy=" in first and "Rank 0: training completed." in first
    assert "Rank 1: epoch 2/2, average epoch loss=" in second, second  # the second pod trained in the gang
    model = json.loads((claim / "runs" / NAME / "model.json").read_text())
    assert model["data"] == "mnist-sample"  # no network: the sample the worker ships, said in the log too
    assert (claim / "runs" / NAME / "model.pt").stat().st_uid == 10001  # written by the pods' user
    every_container_ran_unprivileged(node, name)


def every_container_ran_unprivileged(node, name: str) -> None:
    """The pod spec's security context, and what containerd gave runc for each container: uid and gid 10001,
    a read-only root filesystem, no capability, no privilege escalation."""
    for pod in pods(node, name):
        context = pod["spec"]["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (10001, 10001, True)
        statuses = pod["status"]["initContainerStatuses"] + pod["status"]["containerStatuses"]
        assert {status["name"] for status in statuses} == {"check-config", "worker"}
        for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
            assert security["capabilities"] == {"drop": ["ALL"]}
        for status in statuses:
            spec = json.loads(node.ctr("containers", "info", status["containerID"].removeprefix("containerd://"))
                              .stdout)["Spec"]
            user = spec["process"]["user"]
            assert (user["uid"], user["gid"]) == (10001, 10001), user
            assert spec["root"].get("readonly") is True
            assert spec["process"].get("noNewPrivileges") is True
            assert not any(spec["process"].get("capabilities", {}).values()), spec["process"].get("capabilities")
