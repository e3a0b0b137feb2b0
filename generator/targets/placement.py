"""Where the training pods may run, beyond nodeSelector and tolerations: the values' ``affinity``,
``topology_spread_constraints``, ``scheduler_name`` and Kueue's ``queue_topology``. This module owns their
options, the checks the API server (and Kueue) would make of them, and what the pod template gets; the affinity
and the constraints pass through as the API spells them (the schema checks their shape), a constraint without a
labelSelector selecting this job's own training pods.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from generator.targets.labels import label_key_problem, label_problems
from generator.values import describe_value

# Kueue's topology-aware scheduling reads these from the pod template of each pod set (the Job's only one).
KUEUE_TOPOLOGY_ANNOTATIONS = {"required": "kueue.x-k8s.io/podset-required-topology",
                              "preferred": "kueue.x-k8s.io/podset-preferred-topology"}
_AFFINITY_KINDS = ("podAffinity", "podAntiAffinity")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class PlacementOptions:
    affinity: Mapping[str, Any] | None = None
    topology_spread: tuple[Mapping[str, Any], ...] = ()
    scheduler_name: str | None = None
    topology: Mapping[str, str | None] | None = None  # queue_topology: {required, preferred}


def placement_options(values: Mapping[str, Any]) -> PlacementOptions:
    return PlacementOptions(affinity=copy.deepcopy(values["affinity"]),
                            topology_spread=tuple(copy.deepcopy(values["topology_spread_constraints"])),
                            scheduler_name=values["scheduler_name"], topology=dict(values["queue_topology"]))


def problems(options: PlacementOptions, queue_name: str | None) -> Iterable[str]:
    """What the API server (or Kueue) would refuse, each naming its key."""
    if options.affinity is not None:
        yield from _affinity_problems(options.affinity)
    for index, constraint in enumerate(options.topology_spread):
        where = f"topology_spread_constraints[{index}]"
        if constraint.get("minDomains") is not None and constraint["whenUnsatisfiable"] != "DoNotSchedule":
            yield f"{where}.minDomains: only applies with whenUnsatisfiable DoNotSchedule"
        yield from _key_problems(constraint["topologyKey"], f"{where}.topologyKey")
        if "labelSelector" in constraint:
            yield from _selector_problems(constraint["labelSelector"], f"{where}.labelSelector")
    yield from _topology_problems(options.topology or {}, queue_name)


def _topology_problems(topology: Mapping[str, str | None], queue_name: str | None) -> Iterable[str]:
    levels = {kind: level for kind, level in topology.items() if level is not None}
    if len(levels) > 1:
        yield "queue_topology: set required or preferred, not both (Kueue takes one level per pod set)"
    for kind, level in sorted(levels.items()):
        yield from _key_problems(level, f"queue_topology.{kind}")
        if queue_name is None:
            yield (f"queue_topology.{kind}: topology-aware scheduling is Kueue's: set queue_name to a LocalQueue "
                   "whose ClusterQueue's flavor names a Topology")


def _key_problems(key: str, where: str) -> Iterable[str]:
    problem = label_key_problem(key)
    if problem:
        yield f"{where}: {describe_value(key)} is not a label key: {problem}"


def _affinity_problems(affinity: Mapping[str, Any]) -> Iterable[str]:
    node = affinity.get("nodeAffinity") or {}
    for number, term in enumerate((node.get(_REQUIRED) or {}).get("nodeSelectorTerms") or []):
        yield from _term_problems(term, f"affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms[{number}]")
    for number, weighted in enumerate(node.get(_PREFERRED) or []):
        yield from _term_problems(weighted["preference"], f"affinity.nodeAffinity.{_PREFERRED}[{number}].preference")
    for kind in _AFFINITY_KINDS:
        pods = affinity.get(kind) or {}
        terms = [(f"affinity.{kind}.{_REQUIRED}[{n}]", term) for n, term in enumerate(pods.get(_REQUIRED) or [])]
        terms += [(f"affinity.{kind}.{_PREFERRED}[{n}].podAffinityTerm", weighted["podAffinityTerm"])
                  for n, weighted in enumerate(pods.get(_PREFERRED) or [])]
        for where, term in terms:
            yield from _key_problems(term["topologyKey"], f"{where}.topologyKey")
            for selector in ("labelSelector", "namespaceSelector"):
                if selector in term:
                    yield from _selector_problems(term[selector], f"{where}.{selector}")


def _term_problems(term: Mapping[str, Any], where: str) -> Iterable[str]:
    """A node selector term's requirements: In/NotIn need values, Exists/DoesNotExist none, Gt/Lt one integer."""
    for field in ("matchExpressions", "matchFields"):
        for number, requirement in enumerate(term.get(field) or []):
            yield from _requirement_problems(requirement, f"{where}.{field}[{number}]")


def _selector_problems(selector: Mapping[str, Any], where: str) -> Iterable[str]:
    yield from label_problems(selector.get("matchLabels") or {}, f"{where}.matchLabels", check_values=True)
    for number, requirement in enumerate(selector.get("matchExpressions") or []):
        yield from _requirement_problems(requirement, f"{where}.matchExpressions[{number}]")


def _requirement_problems(requirement: Mapping[str, Any], where: str) -> Iterable[str]:
    operator, values = requirement["operator"], requirement.get("values") or []
    if operator in ("In", "NotIn") and not values:
        yield f"{where}.values: operator {operator} needs at least one value"
    elif operator in ("Exists", "DoesNotExist") and values:
        yield f"{where}.values: must be empty when operator is {operator}"
    elif operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
        yield f"{where}.values: operator {operator} takes exactly one whole number"


def topology_spread(options: PlacementOptions, own_pods: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """The constraints as the pod spec spells them; one without a labelSelector spreads this job's own pods."""
    return tuple({**constraint, "labelSelector": constraint.get("labelSelector") or {"matchLabels": dict(own_pods)}}
                 for constraint in options.topology_spread)


def topology_annotations(options: PlacementOptions) -> dict[str, str]:
    """Kueue's podset topology annotation of the level asked for, if any."""
    return {KUEUE_TOPOLOGY_ANNOTATIONS[kind]: level for kind, level in sorted((options.topology or {}).items())
            if level is not None}
