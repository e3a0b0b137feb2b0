"""What a local pod gets: Kubernetes' env, Downward API, $(VAR) expansion, names, ports and paths."""

from pathlib import Path

import pytest
import yaml

from generator.resources import default_values_path
from generator.targets.kubernetes import render_manifests, to_stream
from generator.validation import validate_values
from generator.values import resolve_values
from localjob.expansion import expand
from localjob.manifests import ManifestError, plan
from localjob.podspec import POD_MARKER, PodFactory
from trainer_contract.quantities import divide_round_up, parse_quantity


@pytest.mark.parametrize("text, expected", [
    ("--node-rank=$(INDEX)", "--node-rank=3"),
    ("$(MISSING) stays", "$(MISSING) stays"),
    ("$$(INDEX) is escaped", "$(INDEX) is escaped"),
    ("cost: $$5", "cost: $5"),
    ("unterminated $(INDEX", "unterminated $(INDEX"),
    ("$(A)$(INDEX)", "a3"),
    ("plain $ sign", "plain $ sign"),
])
def test_kubelet_expansion(text, expected):
    assert expand(text, {"INDEX": "3", "A": "a"}) == expected


@pytest.mark.parametrize("text, value", [("500m", "0.5"), ("2", "2"), ("4Gi", str(4 * 2**30)), ("1k", "1000")])
def test_quantities(text, value):
    assert parse_quantity(text) == parse_quantity(value)


def test_downward_api_rounds_up():
    assert divide_round_up(parse_quantity("500m"), parse_quantity("1")) == 1
    assert divide_round_up(parse_quantity("2"), parse_quantity("1")) == 2


def rendered(*sets):
    values = validate_values(resolve_values(default_values_path(), [], sets))
    return list(yaml.safe_load_all(to_stream(render_manifests(values))))


def test_pod_gets_the_environment_and_command_kubernetes_would_give_it(tmp_path):
    job_plan = plan(rendered("replicas=3", "master_port=29555", "namespace=ml"))
    factory = PodFactory(job_plan, tmp_path, {}, {"EXTRA": "1"}, {29555: 40001})
    pod = factory.pod(2)
    main = pod.container
    assert pod.name.startswith("mnist-train-2-") and pod.index == 2
    assert main.argv == ["python", "-m", "worker.launch", "--nnodes=3", "--nproc-per-node=1", "--node-rank=2",
                         "--master-addr=127.0.0.1", "--master-port=40001", "--max-restarts=0",
                         "--rdzv-conf=timeout=600", "--shutdown-timeout=55", "-m", "worker"]
    env = main.env
    assert env["JOB_COMPLETION_INDEX"] == "2"
    assert env["OMP_NUM_THREADS"] == "2"  # limits.cpu "2", divisor 1
    assert env["PYTHONUNBUFFERED"] == "1" and env["EXTRA"] == "1"
    assert env["EPOCHS"] == "5"  # from the ConfigMap, through envFrom
    claim = tmp_path / "volumes" / "mnist-train-data"
    assert env["DATA_DIR"] == f"{claim}/data" and env["OUTPUT_DIR"] == f"{claim}/runs/mnist-train"
    assert env["HOSTNAME"] == "mnist-train-2" and env[POD_MARKER] == pod.uid
    assert env["TMPDIR"].startswith(str(tmp_path / "pods" / pod.name))
    assert pod.init_containers[0].argv == ["python", "-m", "worker", "--check-config"]
    assert pod.init_containers[0].env["JOB_COMPLETION_INDEX"] == "2"


def test_each_pod_serves_its_metrics_on_a_port_of_its_own_the_rendezvous_on_the_shared_one(tmp_path):
    """On a cluster every pod has its own network namespace; here they share one: the Service's port is shared
    (only pod 0 binds it), the metrics port (declared by the container, in no Service) is each pod's own."""
    job_plan = plan(rendered("replicas=2", "metrics.port=9555"))
    factory = PodFactory(job_plan, tmp_path, {}, {}, {29500: 40003})
    pods = [factory.pod(0), factory.pod(1)]
    ports = [pod.container.env["INDEXED_TRAINER_METRICS_PORT"] for pod in pods]
    assert ports[0] != ports[1] and "9555" not in ports
    assert [pod.ports for pod in pods] == [{"rendezvous": 40003, "metrics": int(port)} for port in ports]
    assert all("--master-port=40003" in pod.container.argv for pod in pods)
    off = PodFactory(plan(rendered("metrics.enabled=false")), tmp_path, {}, {}, {29500: 40004}).pod(0)
    assert "INDEXED_TRAINER_METRICS_PORT" not in off.container.env and off.ports == {"rendezvous": 40004}


def test_rewrites_every_form_of_the_service_name_and_only_whole_names(tmp_path):
    job_plan = plan(rendered("namespace=ml"))
    factory = PodFactory(job_plan, tmp_path, {}, {}, {29500: 40002})
    for name in ("mnist-train-1.mnist-train", "mnist-train-1.mnist-train.ml.svc.cluster.local"):
        assert factory.rewrite(f"tcp://{name}:29500", {}) == "tcp://127.0.0.1:40002"
    assert factory.rewrite("mnist-train-1.mnist-trainer", {}) == "mnist-train-1.mnist-trainer"
    assert factory.rewrite("/pvc-homework/x", {"/pvc-home": Path("/local")}) == "/pvc-homework/x"
    assert factory.rewrite("/tmp/pvc-home", {"/pvc-home": Path("/v"), "/tmp": Path("/t")}) == "/t/pvc-home"


def test_existing_claim_directory_is_used_as_given(tmp_path):
    job_plan = plan(rendered("shared_volume.existing_claim=team-data"))
    pod = PodFactory(job_plan, tmp_path / "root", {"team-data": tmp_path / "mine"}, {}, {}).pod(0)
    assert pod.container.env["DATA_DIR"] == f"{tmp_path / 'mine'}/data"


def refuse(docs, message):
    with pytest.raises(ManifestError) as caught:
        plan(docs)
    assert any(message in problem for problem in caught.value.problems), caught.value.problems


def test_refuses_what_it_cannot_run_faithfully():
    docs = rendered()
    job = docs[-1]
    job["spec"]["completionMode"] = "NonIndexed"
    refuse(docs, "only Indexed Jobs can be run")

    docs = rendered()
    docs[-1]["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
    refuse(docs, "env TOKEN needs Secret s: provide it with --secret s=PATH")
    with pytest.raises(ManifestError, match="needs key k of Secret s, which has only: other"):
        plan(docs, {"s": {"other": "hidden-value"}})
    assert plan(docs, {"s": {"k": "v"}}).secrets == {"s": {"k": "v"}}

    docs = rendered() + [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}}]
    refuse(docs, "Secret s: a Secret does not belong beside the manifests")

    docs = rendered()
    with pytest.raises(ManifestError, match="--secret s: key RANK is set by torchrun"):
        plan(docs, {"s": {"RANK": "3"}})

    docs = rendered()
    docs[-1]["spec"]["template"]["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    refuse(docs, "type hostPath is not supported locally")

    refuse([d for d in rendered() if d["kind"] != "Service"], "names a Service that is not in the manifests")
    refuse([d for d in rendered() if d["kind"] != "ConfigMap"], "takes env from ConfigMap mnist-train-config-")
    refuse([d for d in rendered() if d["kind"] != "Job"], "expected exactly one Job")


def test_a_network_policy_and_a_pod_monitor_are_accepted_and_named_as_not_applied():
    docs = rendered("network_policy.enabled=true", "metrics.pod_monitor=true")
    assert docs[0]["kind"] == "NetworkPolicy"
    assert plan(docs).not_enforced == [
        "NetworkPolicy mnist-train: not enforced here (the pods are processes of this machine, on its network)",
        "PodMonitor mnist-train: not applied here (no Prometheus Operator; `local-job status` shows the live metrics)"]
    refuse(rendered() + [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}],
           "Deployment d: local-job runs Jobs with their ConfigMaps, Services, claims, NetworkPolicies and PodMonitors "
           "only")
