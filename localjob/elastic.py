"""Elastic Indexed Jobs (KEP-3715, Kubernetes 1.27 and later) as the API server validates a change of completions
and the Job controller acts on it, for `local-job scale N` (on a cluster ./run.sh --scale N patches the same
fields: generator/scale.py).

The API server lets an Indexed Job's completions change only together with parallelism, both equal before and
after, and never once the Job has finished; the fields and their bounds are the replica groups'
(trainer_contract.replica_groups.scaled: MIN_REPLICAS to MAX_REPLICAS of the pods' ConfigMap), so a Job that is one
gang is refused. The controller then creates pods for the new indexes and deletes those of indexes now out of range,
which it never replaces; their failures still count (the KEP's "failures always count": the replica groups' pods
leave with a code the Job ignores), and an index out of range no longer counts as succeeded.
"""

from __future__ import annotations

from localjob.manifests import MAX_LOCAL_PODS, JobPlan
from trainer_contract import replica_groups
from trainer_contract.settings import ConfigError


class Refused(Exception):
    """The scale the API server (or the job's bounds) refuses; the message says why."""


def fields(plan: JobPlan, count: int) -> dict[str, int]:
    """The Job's fields for ``count`` pods; Refused."""
    spec = plan.spec
    if spec.get("completionMode") != "Indexed" or int(spec.get("parallelism", 1)) != plan.completions:
        raise Refused("spec.completions may change only for an Indexed Job whose parallelism equals it")
    environment = {key: value for data in plan.config_maps.values() for key, value in data.items()}
    try:
        bounds = replica_groups.bounds_of(environment)
    except ConfigError as error:
        raise Refused(error.problems[0]) from None
    if bounds is None:
        raise Refused(f"Job {plan.name} is one gang, whose size is fixed: only replica groups "
                      "(fault_tolerance.replica_groups) scale while they run")
    if count > MAX_LOCAL_PODS:
        raise Refused(f"{count} pods are too many for one machine (at most {MAX_LOCAL_PODS})")
    try:
        return replica_groups.scaled(count, *bounds)
    except ValueError as error:
        raise Refused(str(error)) from None
