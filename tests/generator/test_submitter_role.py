"""examples/rbac/submitter.yaml grants what ./run.sh, ./run.sh --status, ./run.sh --scale, the commands run.sh prints for following the
job and ./clean.sh ask of the API server, and nothing more: each kubectl call (recorded by a kubectl that logs its
arguments and answers the status view as a cluster would), translated to the RBAC requests it makes, must be
allowed by the Role (namespaced) or the ClusterRole (the pre-checks' cluster-scoped reads), and every verb they
grant must be one of those requests. tests/controlplane/test_submitter_role.py asks a real API server the same
requests with `kubectl auth can-i`."""

from __future__ import annotations

import yaml

from tests.conftest import ROOT
from tests.generator.test_scripts import script

ROLE_FILE = ROOT / "examples" / "rbac" / "submitter.yaml"
# the rendered objects' kinds as RBAC names them, for apply and delete -f
APPLIED = {"0-networkpolicy.yaml": ("networking.k8s.io", "networkpolicies"),
           "0-lighthouse-networkpolicy.yaml": ("networking.k8s.io", "networkpolicies"),
           "1-persistentvolumeclaim.yaml": ("", "persistentvolumeclaims"), "2-configmap.yaml": ("", "configmaps"),
           "3-service.yaml": ("", "services"), "4-job.yaml": ("batch", "jobs"),
           "3-lighthouse-service.yaml": ("", "services"), "3-lighthouse-deployment.yaml": ("apps", "deployments")}
# (verb, API group, resource, name or None, namespaced): what each kubectl command line the scripts run needs
GETS = {"namespace": ("", "namespaces", False), "serviceaccount": ("", "serviceaccounts", True),
        "priorityclass": ("scheduling.k8s.io", "priorityclasses", False),
        "crd": ("apiextensions.k8s.io", "customresourcedefinitions", False),
        "localqueues.kueue.x-k8s.io": ("kueue.x-k8s.io", "localqueues", True), "job": ("batch", "jobs", True)}
# A kubectl that records its arguments and answers the status view as a cluster would: a suspended Job Kueue
# holds, index 0 Running with a metrics port, index 1 Pending; so the view makes every read it can make.
ANSWERING_KUBECTL = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
with open(LOG, "a") as log:
    log.write(" ".join(args) + "\\n")
words = [word for word in args if not word.startswith("-")]
def pod(index, phase):
    return {"metadata": {"name": f"mnist-train-{index}-abcde", "creationTimestamp": "2026-11-26T10:00:00Z",
                         "labels": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": {"containers": [{"name": "worker", "ports": [{"name": "metrics", "containerPort": 9400}]}]},
            "status": {"phase": phase}}
if "job" in words and "get" in words:
    print(json.dumps({"metadata": {"name": "mnist-train", "namespace": "team-a", "uid": "u1",
                                   "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
                      "spec": {"suspend": True, "completions": 2, "backoffLimit": 3}, "status": {}}))
elif "pods" in words and "get" in words:
    print(json.dumps({"items": [pod(0, "Running"), pod(1, "Pending")]}))
elif "get" in words and ("events" in words or "workloads.kueue.x-k8s.io" in words):
    print(json.dumps({"items": []}))
elif "logs" in words:
    print("Rank 0: epoch 1/5, 10 s elapsed")
"""


def scripted_requests(tmp_path) -> list[tuple[str, str, str, str | None, bool]]:
    """Every RBAC request of ./prepare.sh, ./run.sh, ./run.sh --status, the commands run.sh prints for following
    the job, and ./clean.sh --all, on values that use every pre-check and the NetworkPolicy."""
    bin_dir, log, build = tmp_path / "fakebin", tmp_path / "kubectl.log", tmp_path / "build"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(ANSWERING_KUBECTL.replace("LOG", repr(str(log))))
    (bin_dir / "kubectl").chmod(0o755)
    assert script("prepare.sh", "--set", "namespace=team-a", "--set", "service_account_name=trainer",
                  "--set", "priority_class_name=urgent", "--set", "queue_name=team-a", "--set", "network_policy.enabled=true", "--set", "metrics.enabled=true",
                  "--set", "fault_tolerance.replica_groups=true", "--set", "fault_tolerance.max_replicas=4",
                  build=build).returncode == 0
    run = script("run.sh", build=build, path_prefix=bin_dir)
    assert run.returncode == 0, run.stderr
    scaled = script("run.sh", "--scale", "3", build=build, path_prefix=bin_dir)
    assert scaled.returncode == 0, scaled.stderr
    status = script("run.sh", "--status", build=build, path_prefix=bin_dir)
    assert status.returncode == 0 and "index 0: mnist-train-0-abcde Running" in status.stdout, status.stdout + status.stderr
    assert script("clean.sh", "--all", build=build, path_prefix=bin_dir).returncode == 0
    printed = [line.strip().removeprefix("kubectl ") for line in run.stderr.splitlines()
               if line.strip().startswith("kubectl -n")]
    assert len(printed) == 3, run.stderr  # follow the pods, index 0's log, wait for the Job
    calls = log.read_text().splitlines() + printed
    return [request for call in calls for request in requests_of(call, build)]


def documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(ROLE_FILE.read_text())}


def allowed(rules: list[dict], verb: str, group: str, resource: str, name: str | None) -> bool:
    return any(verb in rule["verbs"] and group in rule["apiGroups"] and resource in rule["resources"]
               and (name is None or name in rule.get("resourceNames", [name])) for rule in rules)


def requests_of(call: str, build) -> list[tuple[str, str, str, str | None, bool]]:
    """The RBAC requests (verb, group, resource, name, namespaced) one kubectl command line makes."""
    words = call.split()
    if words[0] == "-n":
        words = words[2:]
    flags = [word for word in words if word.startswith("-")]
    if words[0] == "version":
        return []  # /version: open to every authenticated user
    if words[0] == "get" and words[1] == "--raw" and "/proxy/" in words[2]:
        return [("get", "", "pods/proxy", None, True)]  # the live metrics through the API server
    if words[0] == "get" and words[1] == "pods":  # by label; -w watches too
        return [("list", "", "pods", None, True)] + ([("watch", "", "pods", None, True)] if "-w" in flags else [])
    if words[0] == "get" and words[1] == "events":
        return [("list", "", "events", None, True)]
    if words[0] == "get" and words[1] == "workloads.kueue.x-k8s.io":
        return [("list", "kueue.x-k8s.io", "workloads", None, True)]
    if words[0] == "get":
        group, resource, namespaced = GETS[words[1]]
        return [("get", group, resource, words[2], namespaced)]
    if words[0] == "logs":  # the pod read by name, or listed (-l); -f follows (still a get of the log)
        found = ("list", "", "pods", None, True) if "-l" in flags else ("get", "", "pods", None, True)
        return [found, ("get", "", "pods/log", None, True)]
    if words[0] == "patch":  # ./run.sh --scale: the Job by its name
        group, resource, namespaced = GETS[words[1]]
        return [("patch", group, resource, words[2], namespaced)]
    if words[0] == "wait":  # job/NAME: read, then listed and watched by its name
        return [(verb, "batch", "jobs", None, True) for verb in ("get", "list", "watch")]
    if words[0] == "apply":
        return [(verb, *APPLIED[path.name], None, True) for path in sorted(build.iterdir()) if path.name in APPLIED
                for verb in ("get", "create", "patch")]
    # kubectl delete --wait: a get, then, while a finalizer holds the object (the Job's foreground deletion, a
    # claim's protection), a list and a watch by its name (k8s.io/kubectl/pkg/cmd/wait/delete.go)
    waits = ("get", "list", "watch") if "--wait=true" in flags else ()
    if words[0] == "delete" and "-f" in words:
        group, resource = APPLIED[words[words.index("-f") + 1].rsplit("/", 1)[1]]
        return [(verb, group, resource, None, True) for verb in ("delete", *waits)]
    if words[:2] == ["delete", "configmap"]:  # by label: listed, then each deleted and waited for
        return [(verb, "", "configmaps", None, True) for verb in ("list", "delete", *waits)]
    raise AssertionError(f"a kubectl call this test does not know: {call}")


def test_the_role_grants_every_request_the_scripts_make(tmp_path):
    requests = scripted_requests(tmp_path)
    found = documents()
    role, cluster = found["Role"]["rules"], found["ClusterRole"]["rules"]
    missing = [request for request in requests
               if not allowed(role if request[4] else cluster, *request[:4])]
    assert not missing, missing
    assert {resource for _, _, resource, _, namespaced in requests if not namespaced} == {
        "namespaces", "priorityclasses", "customresourcedefinitions"}
    # and nothing more: every verb the Role and the ClusterRole grant is one of these requests
    granted = {(group, resource, verb) for rules in (role, cluster) for rule in rules for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == {(group, resource, verb) for verb, group, resource, _, _ in requests}


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
