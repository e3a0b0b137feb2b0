"""Every rendered pod template against the *restricted* Pod Security Standard, control by control.

Admission rejects the pods, not the Job, and `kubectl apply` of the Job would not tell the user: so each
control of the standard (kubernetes.io/docs/concepts/security/pod-security-standards, baseline + restricted)
is checked here over a matrix of values.
"""

import pytest

from tests.generator.test_render import MATRIX, job_of, render

# Volume types the restricted profile allows.
ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                   "projected", "secret"}
CASES = {**MATRIX, "extra-labels": ["labels={team: a, tier: gold}", "annotations={note: x}"]}


def containers(pod):
    return pod.get("initContainers", []) + pod["containers"] + pod.get("ephemeralContainers", [])


@pytest.mark.parametrize("case", sorted(CASES))
def test_pod_template_meets_every_restricted_control(case):
    pod = job_of(render(*CASES[case]))["spec"]["template"]["spec"]
    pod_context = pod.get("securityContext", {})
    # baseline: host namespaces, privileged, capabilities, hostPath, host ports, AppArmor, SELinux, /proc, sysctls
    assert not any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    assert "sysctls" not in pod_context
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        assert kinds <= ALLOWED_VOLUMES, volume  # no hostPath or other non-allowed types
    for container in containers(pod):
        context = container.get("securityContext", {})
        assert not context.get("privileged", False)
        assert all(port.get("hostPort", 0) == 0 for port in container.get("ports", []))
        assert context.get("procMount", "Default") == "Default"
        assert context.get("seLinuxOptions", {}).get("type", "") in ("", "container_t", "container_init_t",
                                                                     "container_kvm_t")
        # restricted: no privilege escalation (explicitly false), non-root, seccomp, drop ALL, add at most NET_BIND_SERVICE
        assert context.get("allowPrivilegeEscalation") is False
        assert context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True
        assert context.get("runAsUser", pod_context.get("runAsUser", 1)) != 0
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {}))
        assert seccomp.get("type") in ("RuntimeDefault", "Localhost")
        assert "ALL" in context.get("capabilities", {}).get("drop", [])
        assert set(context.get("capabilities", {}).get("add", [])) <= {"NET_BIND_SERVICE"}
    assert pod_context.get("runAsUser", 1) != 0 and pod.get("automountServiceAccountToken") is False
