"""examples/rbac/submitter.yaml on a real kube-apiserver: `kubectl auth can-i`, as a member of the bound group,
says yes to every request ./run.sh, ./run.sh --status, the following commands run.sh prints and ./clean.sh make (the
list tests/generator/test_submitter_role.py derives from the scripts' recorded calls) and no to what a submitter
must not do. Skipped without $KUBE_ASSETS (see cluster.py)."""

import json

import pytest

from tests.generator.test_submitter_role import ROLE_FILE, scripted_requests

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]
AS = ("--as", "alice", "--as-group", "ml-engineers")


def can(control_plane, verb: str, group: str, resource: str, name: str | None = None) -> bool:
    base, _, subresource = resource.partition("/")
    target = f"{base}.{group}" if group else base
    if name:
        target += f"/{name}"
    extra = ("--subresource", subresource) if subresource else ()
    answer = control_plane.kubectl("auth", "can-i", verb, target, *extra, "-n", "team-a", *AS, check=False)
    return answer.stdout.strip() == "yes"


def kueue_crd(kind: str, plural: str) -> dict:
    """Kueue's resource as its CRD names it (the schema left open): a cluster that uses queue_name has it, and
    `kubectl auth can-i` resolves a resource through the API's discovery."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
            "spec": {"group": "kueue.x-k8s.io", "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_a_submitter_may_do_what_the_scripts_do_and_no_more(control_plane, tmp_path):
    control_plane.kubectl("create", "namespace", "team-a")
    crds = [kueue_crd("LocalQueue", "localqueues"), kueue_crd("Workload", "workloads")]
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds}))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          *(f"crd/{crd['metadata']['name']}" for crd in crds))
    control_plane.kubectl("apply", "-f", str(ROLE_FILE))
    requests = sorted({request[:4] for request in scripted_requests(tmp_path)}, key=str)
    refused = [request for request in requests if not can(control_plane, *request)]
    assert not refused, refused
    for forbidden in (("get", "", "secrets"), ("create", "rbac.authorization.k8s.io", "roles"),
                      ("delete", "", "namespaces", "team-a"), ("create", "", "pods/exec"),
                      ("get", "apiextensions.k8s.io", "customresourcedefinitions", "clusterqueues.kueue.x-k8s.io")):
        assert not can(control_plane, *forbidden), forbidden
