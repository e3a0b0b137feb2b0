"""network_policy: the rendered NetworkPolicy lets through the traffic docs/operators.md lists and nothing else,
read with the API's documented semantics (a small evaluator below: policies select pods, a connection is allowed
when some rule's peers and ports match it); its values are checked at render time, each fault naming its key."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.generator.helpers import run_main

EGRESS = ("network_policy.egress=[{cidr: 0.0.0.0/0, except: [10.0.0.0/8, 169.254.169.254/32], ports: [443]}, "
          "{namespace: storage, pod_labels: {app: minio}, ports: [9000]}]")
POLICY = ["--set", "network_policy.enabled=true", "--set", EGRESS, "--set", "network_policy.metrics_namespace=monitoring",
          "--set", "initializer.model.storage_uri=hf://org/model", "--set", "checkpoint.storage_uri=s3://ckpt/run",
          "--set", "storage_secret=s3-credentials"]


def rendered(*args: str) -> dict[str, dict]:
    result = run_main(*args)
    assert result.exit_code == 0, result.stderr
    return {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout)}


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = "10.1.2.3"


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # the render uses matchLabels only
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def _peer_matches(peer: dict, policy_namespace: str, other: Pod, namespaces: dict[str, dict[str, str]]) -> bool:
    if "ipBlock" in peer:
        address = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(part) for part in block.get("except", []))
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], namespaces.get(other.namespace, {})):
            return False
    elif other.namespace != policy_namespace:
        return False  # a podSelector alone selects in the policy's own namespace
    return _selects(peer.get("podSelector", {}), other.labels)


def allows(policy: dict, direction: str, pod: Pod, other: Pod, port: int, protocol: str = "TCP") -> bool:
    """Whether ``policy`` lets ``pod`` (one it selects) take (ingress) or open (egress) a connection with ``other``."""
    namespace, spec = policy["metadata"]["namespace"], policy["spec"]
    assert pod.namespace == namespace and _selects(spec["podSelector"], pod.labels)
    if direction.capitalize() not in spec["policyTypes"]:
        return True
    namespaces = {name: {"kubernetes.io/metadata.name": name} for name in (pod.namespace, other.namespace)}
    peers_key = "from" if direction == "ingress" else "to"
    return any(
        (peers_key not in rule or any(_peer_matches(peer, namespace, other, namespaces) for peer in rule[peers_key]))
        and ("ports" not in rule or any(item["port"] == port and item.get("protocol", "TCP") == protocol
                                        for item in rule["ports"]))
        for rule in spec.get(direction, []))


def test_the_policy_lets_through_the_traffic_table_and_nothing_else():
    objects = rendered(*POLICY, "--set", "metrics.enabled=true")
    policy, job = objects["NetworkPolicy"], objects["Job"]
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    worker, peer = Pod("default", pod_labels, "10.1.0.5"), Pod("default", pod_labels, "10.1.0.6")
    stranger = Pod("default", {"app": "other"}, "10.1.0.7")
    prometheus = Pod("monitoring", {"app": "prometheus"}, "10.2.0.1")
    other_prometheus = Pod("team-b", {"app": "prometheus"}, "10.3.0.1")
    hub, metadata_service, node = Pod("", ip="13.35.1.1"), Pod("", ip="169.254.169.254"), Pod("", ip="10.0.0.10")
    minio, other_minio = Pod("storage", {"app": "minio"}), Pod("storage", {"app": "console"})
    rows = [  # (direction, other, port, protocol, allowed)
        ("ingress", peer, 29500, "TCP", True),  # the rendezvous on pod 0
        ("ingress", peer, 41213, "TCP", True),  # a collective's ephemeral port
        ("egress", peer, 29500, "TCP", True),
        ("egress", peer, 52001, "TCP", True),
        ("ingress", prometheus, 9400, "TCP", True),
        ("ingress", prometheus, 29500, "TCP", False),
        ("ingress", other_prometheus, 9400, "TCP", False),
        ("ingress", stranger, 29500, "TCP", False),
        ("egress", stranger, 29500, "TCP", False),
        ("egress", node, 53, "UDP", True),  # DNS, wherever the resolver listens
        ("egress", Pod("kube-system", {"k8s-app": "kube-dns"}, "10.96.0.10"), 53, "TCP", True),
        ("egress", hub, 443, "TCP", True),
        ("egress", hub, 80, "TCP", False),
        ("egress", metadata_service, 443, "TCP", False),
        ("egress", node, 443, "TCP", False),
        ("egress", minio, 9000, "TCP", True),
        ("egress", other_minio, 9000, "TCP", False),
        ("egress", minio, 9001, "TCP", False),
    ]
    verdicts = [(direction, other, port, allows(policy, direction, worker, other, port, protocol))
                for direction, other, port, protocol, _ in rows]
    assert verdicts == [(direction, other, port, expected) for direction, other, port, _, expected in rows]


def test_the_policy_is_applied_first_and_the_pods_it_selects_are_the_jobs():
    objects = rendered(*POLICY)
    selector = objects["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"]
    assert selector == objects["Service"]["spec"]["selector"]
    assert _selects({"matchLabels": selector}, objects["Job"]["spec"]["template"]["metadata"]["labels"])
    kinds = [doc["kind"] for doc in yaml.safe_load_all(run_main(*POLICY).stdout)]
    assert kinds[0] == "NetworkPolicy" and kinds[-1] == "Job"


def test_without_metrics_no_port_is_open_to_other_namespaces():
    policy = rendered(*POLICY[:-6], "--set", "metrics.enabled=false", "--set",
                      "network_policy.metrics_namespace=null")["NetworkPolicy"]
    assert len(policy["spec"]["ingress"]) == 1  # the job's own pods


def test_metrics_only_from_the_jobs_own_pods_when_no_monitoring_stack_is_named():
    """The endpoint is a server inside the training process: no other namespace reaches it unless named."""
    policy = rendered("--set", "network_policy.enabled=true", "--set", "metrics.enabled=true")["NetworkPolicy"]
    worker = Pod("default", policy["spec"]["podSelector"]["matchLabels"])
    assert not allows(policy, "ingress", worker, Pod("anywhere", {"app": "prometheus"}), 9400)
    assert allows(policy, "ingress", worker, worker, 9400)


@pytest.mark.parametrize(("labels", "scraper", "allowed"), [
    ("{}", Pod("monitoring", {"app": "grafana-agent"}), True),
    ("{app: prometheus}", Pod("monitoring", {"app": "prometheus"}), True),
    ("{app: prometheus}", Pod("monitoring", {"app": "debug-shell"}), False),
    ("{app: prometheus}", Pod("default", {"app": "prometheus"}), False),
])
def test_metrics_from_the_named_monitoring_stack_only(labels, scraper, allowed):
    policy = rendered("--set", "network_policy.enabled=true", "--set", "metrics.enabled=true",
                      "--set", "network_policy.metrics_namespace=monitoring",
                      "--set", f"network_policy.metrics_pod_labels={labels}")["NetworkPolicy"]
    worker = Pod("default", policy["spec"]["podSelector"]["matchLabels"])
    assert allows(policy, "ingress", worker, scraper, 9400) == allowed
    assert not allows(policy, "ingress", worker, scraper, 29500)


def test_monitoring_labels_without_a_namespace_are_refused():
    result = run_main("--set", "network_policy.enabled=true", "--set", "metrics.enabled=true",
                      "--set", "network_policy.metrics_pod_labels={app: prometheus}")
    assert result.exit_code == 2 and result.stdout == ""
    assert "network_policy.metrics_pod_labels: selects pods of metrics_namespace, which is null" in result.stderr


def test_off_by_default_and_off_renders_no_policy():
    assert "NetworkPolicy" not in rendered()
    result = run_main("--set", EGRESS)
    assert result.exit_code == 0 and "kind: NetworkPolicy" not in result.stdout
    assert "network_policy: egress or metrics_namespace set, but enabled is false" in result.stderr


@pytest.mark.parametrize(("sets", "message"), [
    (["initializer.model.storage_uri=hf://org/model"],
     "network_policy.egress: empty, but initializer.model.storage_uri (hf://org/model) is reached over the network"),
    (["initializer.dataset.storage_uri_secret={name: presigned, key: url}"],
     "network_policy.egress: empty, but initializer.dataset.storage_uri_secret is reached over the network"),
    (["export.storage_uri=s3://models/x", "storage_secret=s3"],
     "network_policy.egress: empty, but export.storage_uri (s3://models/x)"),
    (["network_policy.egress=[{cidr: 10.0.0.1/8, ports: [443]}]"],
     'network_policy.egress[0].cidr: "10.0.0.1/8" has host bits set; write the range as 10.0.0.0/8'),
    (["network_policy.egress=[{cidr: 10.0.0.1, ports: [443]}]"],
     'network_policy.egress[0].cidr: "10.0.0.1" has no prefix length; write a range, such as 10.0.0.1/32'),
    (["network_policy.egress=[{cidr: 10.0.0.0/8, except: [10.1.2.3], ports: [443]}]"],
     'network_policy.egress[0].except[0]: "10.1.2.3" has no prefix length'),
    (["network_policy.egress=[{cidr: example.com, ports: [443]}]"],
     'network_policy.egress[0].cidr: "example.com" is not an address range'),
    (["network_policy.egress=[{cidr: 10.0.0.0/8, except: [11.0.0.0/16], ports: [443]}]"],
     "network_policy.egress[0].except[0]: 11.0.0.0/16 must lie inside cidr 10.0.0.0/8 and be smaller than it"),
    (["network_policy.egress=[{cidr: 10.0.0.0/8, except: [10.0.0.0/8], ports: [443]}]"],
     "network_policy.egress[0].except[0]: 10.0.0.0/8 must lie inside cidr 10.0.0.0/8 and be smaller than it"),
    (["network_policy.egress=[{cidr: 10.0.0.0/8, except: ['fd00::/8'], ports: [443]}]"],
     "network_policy.egress[0].except[0]: fd00::/8 must lie inside cidr 10.0.0.0/8"),
    (["network_policy.egress=[{ports: [443]}]"],
     "network_policy.egress[0]: needs exactly one of cidr (an address range) and namespace"),
    (["network_policy.egress=[{cidr: 10.0.0.0/8, namespace: storage, ports: [443]}]"],
     "network_policy.egress[0]: needs exactly one of cidr (an address range) and namespace"),
    (["network_policy.egress=[{namespace: storage, except: [10.0.0.0/8], ports: [443]}]"],
     "network_policy.egress[0].except: only applies with cidr"),
    (["network_policy.egress=[{cidr: 10.0.0.0/8, pod_labels: {app: minio}, ports: [443]}]"],
     "network_policy.egress[0].pod_labels: only applies with namespace"),
    (["network_policy.egress=[{namespace: storage, pod_labels: {'a b': minio}, ports: [443]}]"],
     "network_policy.egress[0].pod_labels.a b: invalid key"),
    (["network_policy.egress=[{cidr: 10.0.0.0/8, ports: []}]"], "network_policy.egress[0].ports"),
    (["network_policy.egress=[{cidr: 10.0.0.0/8, ports: [70000]}]"], "network_policy.egress[0].ports[0]"),
    (["network_policy.metrics_namespace=monitoring", "entrypoint.module=my_pkg.train"],
     "network_policy.metrics_namespace: only applies with metrics on (metrics.enabled)"),
])
def test_values_the_policy_cannot_keep_are_refused_naming_the_key(sets, message):
    args = [arg for item in ["network_policy.enabled=true", *sets] for arg in ("--set", item)]
    result = run_main(*args)
    assert result.exit_code != 0 and result.stdout == ""
    assert message in result.stderr


def test_slurm_and_local_job_name_it_ignored():
    for target, title in (("slurm", "Slurm"), ("local", "local-job")):
        result = run_main("--target", target, "--set", "network_policy.enabled=true",
                          "--set", "initializer.model.storage_uri=hf://org/model")
        assert result.exit_code == 0, result.stderr
        assert f"ignored on {title}: network_policy.enabled" in result.stderr


@st.composite
def networks(draw):
    version = draw(st.sampled_from((4, 6)))
    address = draw(st.ip_addresses(v=version))
    prefix = draw(st.integers(0, 32 if version == 4 else 128))
    return ipaddress.ip_network(f"{address}/{prefix}", strict=False), address


@given(networks())
def test_any_range_is_rendered_as_written_and_host_bits_are_named(found):
    network, address = found
    result = run_main("--set", "network_policy.enabled=true",
                      "--set", f"network_policy.egress=[{{cidr: '{network}', ports: [443]}}]")
    assert result.exit_code == 0, result.stderr
    policy = next(doc for doc in yaml.safe_load_all(result.stdout) if doc["kind"] == "NetworkPolicy")
    assert policy["spec"]["egress"][-1]["to"] == [{"ipBlock": {"cidr": str(network)}}]
    written = f"{address}/{network.prefixlen}"
    if written != str(network):
        refused = run_main("--set", "network_policy.enabled=true",
                           "--set", f"network_policy.egress=[{{cidr: '{written}', ports: [443]}}]")
        assert refused.exit_code != 0 and f"write the range as {network}" in refused.stderr
