"""examples/rbac/submitter.yaml grants what ./run.sh, ./clean.sh and ./run.sh --status ask of the API server, and
nothing more: each kubectl call the scripts make (recorded by a kubectl that logs its arguments), and each read
the status view makes, translated to the RBAC request it is, must be allowed by the Role (namespaced) or the
ClusterRole (the pre-checks' cluster-scoped reads). tests/controlplane/test_submitter_role.py asks the real API
server the same with `kubectl auth can-i`."""

from __future__ import annotations

import yaml

from tests.conftest import ROOT
from tests.generator.test_scripts import fake_kubectl, script  # noqa: F401 -- fake_kubectl: a fixture

ROLE_FILE = ROOT / "examples" / "rbac" / "submitter.yaml"
# the rendered objects' kinds as RBAC names them, for apply and delete -f
APPLIED = {"0-networkpolicy.yaml": ("networking.k8s.io", "networkpolicies"),
           "1-persistentvolumeclaim.yaml": ("", "persistentvolumeclaims"), "2-configmap.yaml": ("", "configmaps"),
           "3-service.yaml": ("", "services"), "4-job.yaml": ("batch", "jobs")}
# (verb, API group, resource, name or None, namespaced): what each kubectl command line the scripts run needs
GETS = {"namespace": ("", "namespaces", False), "serviceaccount": ("", "serviceaccounts", True),
        "priorityclass": ("scheduling.k8s.io", "priorityclasses", False),
        "crd": ("apiextensions.k8s.io", "customresourcedefinitions", False),
        "localqueues.kueue.x-k8s.io": ("kueue.x-k8s.io", "localqueues", True), "job": ("batch", "jobs", True)}
# what ./run.sh prints for following the job, and what the status view (generator/status.py) reads
FOLLOW_AND_STATUS = [("list", "", "pods", None, True), ("watch", "", "pods", None, True),
                     ("get", "", "pods/log", None, True), ("get", "batch", "jobs", None, True),
                     ("watch", "batch", "jobs", None, True), ("list", "batch", "jobs", None, True),
                     ("list", "", "events", None, True), ("get", "", "pods/proxy", None, True),
                     ("list", "kueue.x-k8s.io", "workloads", None, True)]
STATUS_READS = ('"get", "job", name', '"get", "pods", "-l"', '"logs", leader', '"get", "events"',
                '"get", "workloads.kueue.x-k8s.io"', '"get", "--raw"')


def documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(ROLE_FILE.read_text())}


def allowed(rules: list[dict], verb: str, group: str, resource: str, name: str | None) -> bool:
    return any(verb in rule["verbs"] and group in rule["apiGroups"] and resource in rule["resources"]
               and (name is None or name in rule.get("resourceNames", [name])) for rule in rules)


def requests_of(call: str, build) -> list[tuple[str, str, str, str | None, bool]]:
    words = call.split()
    if words[:2] == ["-n", "default"]:
        words = words[2:]
    if words[0] == "version":
        return []  # /version: open to every authenticated user
    if words[0] == "get":
        group, resource, namespaced = GETS[words[1]]
        return [("get", group, resource, words[2], namespaced)]
    if words[0] == "apply":
        return [(verb, *APPLIED[path.name], None, True) for path in sorted(build.iterdir()) if path.name in APPLIED
                for verb in ("get", "create", "patch")]
    if words[0] == "delete" and "-f" in words:
        group, resource = APPLIED[words[words.index("-f") + 1].rsplit("/", 1)[1]]
        return [("delete", group, resource, None, True), ("get", group, resource, None, True)]
    if words[:2] == ["delete", "configmap"]:
        return [("list", "", "configmaps", None, True), ("delete", "", "configmaps", None, True)]
    raise AssertionError(f"a kubectl call this test does not know: {call}")


def test_the_role_grants_every_request_the_scripts_make(tmp_path, fake_kubectl):  # noqa: F811
    bin_dir, log = fake_kubectl
    build = tmp_path / "build"
    assert script("prepare.sh", "--set", "service_account_name=trainer", "--set", "priority_class_name=urgent",
                  "--set", "queue_name=team-a", "--set", "network_policy.enabled=true", build=build).returncode == 0
    assert script("run.sh", build=build, path_prefix=bin_dir).returncode == 0
    assert script("clean.sh", "--all", build=build, path_prefix=bin_dir).returncode == 0
    calls = log.read_text().splitlines()
    requests = [request for call in calls for request in requests_of(call, build)] + FOLLOW_AND_STATUS
    status = (ROOT / "generator" / "status.py").read_text()
    assert all(read in status for read in STATUS_READS), "the status view's reads changed: update FOLLOW_AND_STATUS"
    found = documents()
    role, cluster = found["Role"]["rules"], found["ClusterRole"]["rules"]
    missing = [request for request in requests
               if not allowed(role if request[4] else cluster, *request[:4])]
    assert not missing, missing
    assert {resource for _, _, resource, _, namespaced in requests if not namespaced} == {
        "namespaces", "priorityclasses", "customresourcedefinitions"}


def test_the_role_is_least_privilege():
    found = documents()
    assert set(found) == {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    for rule in found["ClusterRole"]["rules"]:
        assert rule["verbs"] == ["get"], rule  # cluster-wide: reads by name only
    every = [rule for kind in ("Role", "ClusterRole") for rule in found[kind]["rules"]]
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] or "*" in rule["apiGroups"] for rule in every)
    assert not any(resource in rule["resources"] for rule in every
                   for resource in ("secrets", "roles", "rolebindings", "pods/exec", "nodes"))
    assert found["RoleBinding"]["roleRef"]["name"] == found["Role"]["metadata"]["name"]
    assert found["ClusterRoleBinding"]["roleRef"]["name"] == found["ClusterRole"]["metadata"]["name"]
