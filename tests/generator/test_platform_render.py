"""A platform team's keys (issue 79): placement beyond nodeSelector, Kueue's topology and priority, metadata on the
pods only, the quota's shape and the PodMonitor, each landing where it means something and nowhere else."""

from __future__ import annotations

import jsonschema
import pytest

from tests.custom_resources import strict_custom_resource
from tests.generator.test_render import MATRIX, job_of, render

PLATFORM = render(*MATRIX["platform"])
BY_KIND = {doc["kind"]: doc for doc in PLATFORM}
POD = job_of(PLATFORM)["spec"]["template"]
WORKER = POD["spec"]["containers"][0]


def test_pod_metadata_lands_on_the_pods_only():
    assert POD["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "team-train"
    assert POD["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    for doc in PLATFORM:
        assert "scheduling.x-k8s.io/pod-group" not in doc["metadata"].get("labels", {}), doc["kind"]
        assert "sidecar.istio.io/inject" not in doc["metadata"].get("annotations", {}), doc["kind"]


def test_kueues_priority_is_on_the_job_and_its_topology_on_the_pod_template():
    job = BY_KIND["Job"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "research"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "kueue.x-k8s.io/priority-class" not in POD["metadata"]["labels"]
    assert POD["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == \
        "cloud.provider.com/topology-block"
    assert not any(key.startswith("kueue.x-k8s.io/podset") for key in job["metadata"].get("annotations", {}))


def test_placement_passes_through_and_spreads_the_jobs_own_pods_by_default():
    spec = POD["spec"]
    assert spec["schedulerName"] == "scheduler-plugins-scheduler"
    node_terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert node_terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["p5.48xlarge"]
    [spread] = spec["topologySpreadConstraints"]
    assert spread["labelSelector"] == {"matchLabels": BY_KIND["Service"]["spec"]["selector"]}
    assert all(POD["metadata"]["labels"][key] == value for key, value in spread["labelSelector"]["matchLabels"].items())
    given = {"labelSelector": {"matchLabels": {"team": "a"}}, "maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
             "whenUnsatisfiable": "ScheduleAnyway"}
    own = job_of(render("topology_spread_constraints=[{maxSkew: 2, topologyKey: kubernetes.io/hostname, "
                        "whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {team: a}}}]"))
    assert own["spec"]["template"]["spec"]["topologySpreadConstraints"] == [given]


def test_cpu_without_a_limit_and_local_disk_bounded():
    resources = WORKER["resources"]
    assert "cpu" not in resources["limits"] and resources["requests"]["cpu"] == "2"
    assert resources["requests"]["ephemeral-storage"] == resources["limits"]["ephemeral-storage"] == "50Gi"
    assert resources["limits"]["memory"] == resources["requests"]["memory"]
    threads = next(v for v in WORKER["env"] if v["name"] == "OMP_NUM_THREADS")["valueFrom"]["resourceFieldRef"]
    assert threads["resource"] == "requests.cpu"  # no limit to read: the request
    tmp = next(v for v in POD["spec"]["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"] == {"sizeLimit": "50Gi"}
    scratch = job_of(render("resources.ephemeral_storage=50", "extra_volumes=[{name: a, mount_path: /a, empty_dir: {}},"
                            " {name: b, mount_path: /b, empty_dir: {size: 5}}]"))["spec"]["template"]["spec"]["volumes"]
    assert [v["emptyDir"] for v in scratch if v["name"] in ("a", "b")] == [{"sizeLimit": "50Gi"}, {"sizeLimit": "5Gi"}]
    default = job_of(render())["spec"]["template"]["spec"]
    assert default["containers"][0]["resources"]["limits"]["cpu"] == "2"
    assert next(v for v in default["volumes"] if v["name"] == "tmp")["emptyDir"] == {}


def test_the_pod_monitor_scrapes_the_pods_metrics_port_and_the_service_names_it():
    monitor = BY_KIND["PodMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"] == BY_KIND["Service"]["spec"]["selector"]
    assert monitor["metadata"]["namespace"] == BY_KIND["Job"]["metadata"]["namespace"]
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    port = next(p for p in WORKER["ports"] if p["name"] == endpoint["port"])
    assert port["containerPort"] == 9400 and endpoint["path"] == "/metrics"
    assert {"name": "metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"} in BY_KIND["Service"]["spec"]["ports"]
    assert "PodMonitor" not in {doc["kind"] for doc in render()}  # off by default
    no_metrics = render("entrypoint.module=my_pkg.train")  # a program of the user's: no metrics by default
    assert [p["name"] for p in next(d for d in no_metrics if d["kind"] == "Service")["spec"]["ports"]] == ["rendezvous"]


def test_the_strict_custom_resource_check_can_fail():
    monitor = {**BY_KIND["PodMonitor"], "spec": {**BY_KIND["PodMonitor"]["spec"], "podMetricEndpoints": []}}
    with pytest.raises(jsonschema.ValidationError):
        strict_custom_resource(monitor)
