"""fault_tolerance.replica_groups in the render: what each value becomes in the Job (its failure budgets, its elastic
bounds, Kueue's elastic-job), and each value the groups cannot run with refused naming its key, nothing rendered."""

import pytest

from tests.generator.test_error_hints import errors
from tests.generator.test_render import job_of, render

GROUPS = ["fault_tolerance.replica_groups=true"]


@pytest.mark.parametrize(("sets", "backoff", "max_failed", "elastic"), [
    # max_restarts 3 for each of 3 groups; the groups above min_replicas (1) may fail, but never all but one
    (["replicas=3"], 9, 1, False),
    (["replicas=4", "fault_tolerance.min_replicas=2"], 12, 2, False),
    (["replicas=3", "fault_tolerance.min_replicas=3"], 9, 0, False),
    (["replicas=2", "fault_tolerance.max_replicas=8"], 24, 0, False),  # every group it may grow to has a budget
    (["replicas=2", "fault_tolerance.max_replicas=8", "queue_name=team-a"], 24, 0, True),
    (["replicas=2", "queue_name=team-a"], 6, 0, False),  # queued, but never scaled: no slice to admit
])
def test_the_jobs_budgets_and_kueues_elastic_job_follow_the_groups(sets, backoff, max_failed, elastic):
    job = job_of(render(*GROUPS, *sets))
    assert (job["spec"]["backoffLimit"], job["spec"]["maxFailedIndexes"]) == (backoff, max_failed)
    assert job["spec"]["backoffLimitPerIndex"] == 3 and job["spec"]["successPolicy"] == {"rules": [{"succeededCount": 1}]}
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["onExitCodes"]["values"] == [78, 79]  # a configuration every group would fail on
    assert rules[1] == {"action": "FailIndex", "onExitCodes": {"containerName": "worker", "operator": "In",
                                                               "values": [80]}}  # one group's crash loop
    annotations = job["metadata"].get("annotations") or {}
    assert (annotations.get("kueue.x-k8s.io/elastic-job") == "true") is elastic


@pytest.mark.parametrize(("target", "sets", "problem"), [
    ("kubernetes", ["fault_tolerance.max_replicas=4"],  # without replica groups
     "fault_tolerance.max_replicas: only a job of replica groups can be scaled while it runs; set "
     "fault_tolerance.replica_groups to true, or max_replicas to null"),
    ("kubernetes", GROUPS + ["replicas=3", "fault_tolerance.max_replicas=2"],
     "fault_tolerance.max_replicas: 2 is fewer than the groups the job starts with (replicas 3): at least 3, or null"),
    ("kubernetes", GROUPS + ["replicas=2", "fault_tolerance.min_replicas=3"],
     "fault_tolerance.min_replicas: 3 is more than the groups there are (replicas 2): at most 2"),
    ("kubernetes", GROUPS + ["config_map.STRATEGY=fsdp"],
     "config_map.STRATEGY: fsdp with replica groups: the groups replicate what each holds; use allreduce or ddp"),
    ("kubernetes", GROUPS + ["entrypoint.module=worker.finetune", "config_map.RESUME=false"],
     "config_map.RESUME: false with replica groups: a group that restarts would set aside what the others train; "
     "give the new run another OUTPUT_DIR instead"),
    ("kubernetes", GROUPS + ["entrypoint.module=worker.finetune", "config_map.PRECISION=fp16",
                             "resources.gpu.accelerator_count=1"],
     "config_map.PRECISION: fp16 with replica groups: a gradient scaler's skipped steps are not agreed across the "
     "groups; use bf16"),
    ("kubernetes", GROUPS + ["entrypoint.module=worker.qa"],
     "fault_tolerance.replica_groups: python -m worker, python -m worker.finetune and python -m worker.sft run as "
     "replica groups, not yet python -m worker.qa: set entrypoint.module to one of them (null: the MNIST worker), or "
     "replica_groups to false"),
    ("slurm", GROUPS + ["fault_tolerance.max_replicas=4"],
     "fault_tolerance.max_replicas: a Slurm allocation does not grow to 4 nodes while it runs; set it to null (or to "
     "replicas) for --target slurm"),
])
def test_values_the_groups_cannot_run_with_are_refused_naming_the_key(target, sets, problem):
    assert errors("--target", target, *[part for item in sets for part in ("--set", item)]) == [problem]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "hsdp"])
def test_sft_groups_shard_within_each_group_or_not(strategy):
    """worker.sft's groups train with any of its strategies: fsdp and hsdp shard the model within a group (a pod),
    and the groups replicate what each holds."""
    job = job_of(render(*GROUPS, "entrypoint.module=worker.sft", f"config_map.STRATEGY={strategy}"))
    assert job["spec"]["completionMode"] == "Indexed"
