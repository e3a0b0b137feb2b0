"""The optional NetworkPolicy (``network_policy`` in the values): the traffic a job needs and nothing more.

docs/operators.md's traffic table is its specification: the job's pods take connections from one another on
every port (torchrun's rendezvous on master_port, then NCCL's or gloo's ephemeral ports) and, with metrics on,
on metrics.port from the metrics namespace; they connect only to one another, to DNS, and to the egress entries
(the Hub, the bucket's endpoint, an https host: what the stage step and the mirror reach). This module owns the
values' keys, their checks and the policy's rules; templates/kubernetes/networkpolicy.yaml.j2 writes them out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from generator.spec import JobSpec
from generator.targets.labels import label_problems
from generator.values import describe_value

# The resolver may be the cluster's DNS pods or a node-local cache on a link-local address: DNS is allowed to
# any address, on its port only.
DNS_PORT = 53
# The label every namespace carries with its own name (Kubernetes >= 1.22), by which metrics_namespace selects.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class EgressRule:
    """One of network_policy.egress: an address range (cidr, with except) or a namespace's pods, on ports."""

    ports: tuple[int, ...]
    cidr: str | None = None
    except_: tuple[str, ...] = ()
    namespace: str | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)

    def peer(self) -> dict[str, Any]:
        """The NetworkPolicyPeer it is (as the API spells it)."""
        if self.cidr is not None:
            block: dict[str, Any] = {"cidr": self.cidr}
            if self.except_:
                block["except"] = list(self.except_)
            return {"ipBlock": block}
        assert self.namespace is not None
        return namespace_peer(self.namespace, self.pod_labels)


def namespace_peer(namespace: str, pod_labels: Mapping[str, str]) -> dict[str, Any]:
    """A policy peer: the pods of ``namespace`` (by its name label), only those with ``pod_labels`` if any."""
    peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}
    if pod_labels:
        peer["podSelector"] = {"matchLabels": dict(pod_labels)}
    return peer


@dataclass(frozen=True)
class NetworkPolicyOptions:
    enabled: bool = False
    egress: tuple[EgressRule, ...] = ()
    metrics_namespace: str | None = None
    metrics_pod_labels: Mapping[str, str] = field(default_factory=dict)
    dns_port: ClassVar[int] = DNS_PORT

    def metrics_peer(self) -> dict[str, Any] | None:
        """Who may scrape the metrics beyond the job's own pods: the monitoring stack's pods, in metrics_namespace
        with metrics_pod_labels; None: nobody else (the endpoint is a server in the training process)."""
        if self.metrics_namespace is None:
            return None
        return namespace_peer(self.metrics_namespace, self.metrics_pod_labels)


def network_policy_options(values: Mapping[str, Any]) -> NetworkPolicyOptions:
    own = values["network_policy"]
    egress = tuple(EgressRule(tuple(item["ports"]), item.get("cidr"), tuple(item.get("except", ())),
                              item.get("namespace"), dict(item.get("pod_labels", {}))) for item in own["egress"])
    return NetworkPolicyOptions(own["enabled"], egress, own["metrics_namespace"], dict(own["metrics_pod_labels"]))


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError:
        return None


def _range_problem(text: str, where: str) -> str | None:
    """Why ``text`` is not an address range in network form (as the API's ipBlock takes it), or None."""
    try:
        meant = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return f"{where}: {describe_value(text)} is not an address range; write it as 10.0.0.0/8 or 2001:db8::/32"
    if "/" not in text:  # Python reads an address alone as one host; the API wants the prefix length written
        return f"{where}: {describe_value(text)} has no prefix length; write a range, such as {meant}"
    if _network(text) is None:
        return f"{where}: {describe_value(text)} has host bits set; write the range as {meant}"
    return None


def _rule_problems(rule: EgressRule, where: str) -> Iterable[str]:
    if (rule.cidr is None) == (rule.namespace is None):
        yield f"{where}: needs exactly one of cidr (an address range) and namespace (the cluster's pods)"
        return
    if rule.cidr is None:
        if rule.except_:
            yield f"{where}.except: only applies with cidr"
        yield from label_problems(rule.pod_labels, f"{where}.pod_labels", check_values=True)
        return
    if rule.pod_labels:
        yield f"{where}.pod_labels: only applies with namespace"
    problem = _range_problem(rule.cidr, f"{where}.cidr")
    if problem:
        yield problem
        return
    for index, text in enumerate(rule.except_):
        inner_where = f"{where}.except[{index}]"
        problem = _range_problem(text, inner_where)
        if problem:
            yield problem
        elif not _strictly_inside(text, rule.cidr):
            yield f"{inner_where}: {text} must lie inside cidr {rule.cidr} and be smaller than it"


def _strictly_inside(inner_text: str, outer_text: str) -> bool:
    """Whether one range is a proper part of the other (what the API asks of an ipBlock's except)."""
    inner, outer = ipaddress.ip_network(inner_text), ipaddress.ip_network(outer_text)
    return inner.version == outer.version and inner != outer and inner.subnet_of(outer)  # type: ignore[arg-type]


def option_problems(spec: JobSpec, options: NetworkPolicyOptions) -> Iterable[str]:
    """What the API server or the policy's meaning would refuse in network_policy, each naming its key."""
    for index, rule in enumerate(options.egress):
        yield from _rule_problems(rule, f"network_policy.egress[{index}]")
    if options.metrics_namespace is not None and spec.metrics_port is None:
        yield "network_policy.metrics_namespace: only applies with metrics on (metrics.enabled)"
    if options.metrics_pod_labels and options.metrics_namespace is None:
        yield ("network_policy.metrics_pod_labels: selects pods of metrics_namespace, which is null: name the "
               "monitoring stack's namespace")


def problems(spec: JobSpec, options: NetworkPolicyOptions) -> Iterable[str]:
    """A policy under which the job could not reach its storage: remote sources, a checkpoint bucket or an export,
    and no egress entry for them."""
    remote = [(key, uri) for key, uri in spec.reached() if uri.scheme != "path"]
    if options.enabled and remote and not options.egress:
        where, uri = remote[0]
        if uri.scheme != "secret":  # a URI from a Secret is never written out
            where += f" ({uri.text})"
        yield (f"network_policy.egress: empty, but {where} is reached over the network and the NetworkPolicy would "
               "block it; add the address range (cidr) or the namespace of its endpoint, with its port (443 for "
               "https), or set network_policy.enabled: false")


def warnings(options: NetworkPolicyOptions) -> Iterable[str]:
    if not options.enabled and (options.egress or options.metrics_namespace is not None or options.metrics_pod_labels):
        yield "network_policy: egress or metrics_namespace set, but enabled is false: no NetworkPolicy is rendered"
