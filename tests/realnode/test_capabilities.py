"""Why gen-manifests offers no key to add capabilities, on a real kubelet: a container of the pods' user (uid 10001,
no privilege escalation) given IPC_LOCK has it in its bounding set only, never in what its processes hold; and what
the launcher's locked-memory check says matches the limit the node's runtime gave the pod."""

import json
import resource

import pytest

from tests.realnode.jobs import log, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

IPC_LOCK = 1 << 14  # linux/capability.h: CAP_IPC_LOCK is 14

PROBE = """
import json, resource
from trainer_launcher import launch
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
print(json.dumps({name: int(status[name], 16) for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
                 | {"memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]}))
launch.check_locked_memory({"NCCL_IB_DISABLE": "0", "INDEXED_TRAINER_GPUS": "1"})
"""


def test_an_added_capability_never_reaches_a_non_root_containers_processes(node, worker_image, namespace):
    name, _ = namespace
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": name}, "spec": {
        "restartPolicy": "Never",
        "securityContext": {"runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "worker", "image": worker_image, "imagePullPolicy": "Never",
                        "command": ["python", "-c", PROBE],
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}}]}}
    node.kubectl("apply", "-f", "-", stdin=json.dumps(pod))

    def ended():
        phase = node.get("-n", name, "pod", "probe")["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None
    phase = wait_for(ended, "the probe pod's end", 180)
    output = log(node, name, "probe")
    assert phase == "Succeeded", output
    sets = json.loads(next(line for line in output.splitlines() if line.startswith("{")))  # stderr interleaves
    assert sets["CapBnd"] == IPC_LOCK, sets  # what the values asked for reached the container ...
    assert sets["CapEff"] == sets["CapPrm"] == sets["CapAmb"] == 0, sets  # ... and none of its processes
    warned = "launcher: warning: NCCL's InfiniBand transport is on" in output
    assert warned == (sets["memlock"] != resource.RLIM_INFINITY), output
