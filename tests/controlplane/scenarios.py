"""One table of Job controller scenarios, two executors: local-job (real processes) and a real control plane
(the Job controller of kube-controller-manager, pods' status written as a kubelet would).

A scenario is values for gen-manifests and a plan: for each completion index, what each of its pods does in
turn (the last entry repeats): "run" (until terminated: it then exits 143, as the worker does on SIGTERM) or
[code, seconds] (exit with code after that many seconds). The pods run tests/controlplane/plan.py through the
indexed-trainer launcher, so their exit codes meet the rendered podFailurePolicy as the worker's do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scenario:
    name: str
    sets: tuple[str, ...]
    plan: dict[int, list]
    expected: dict = field(default_factory=dict)  # what both executors must report
    # the rendered gang's Job made as fault_tolerance.replica_groups renders one (which it does for the built-in
    # worker only): each pod a gang of its own, a crash loop (80) fails its index, the first success completes the
    # Job; with these indexes allowed to fail
    replica_groups_failing: int | None = None


PLAN_VALUES = ("replicas=2", "entrypoint.module=null", "entrypoint.script=plan.py",
               "entrypoint.launcher=indexed-trainer", "resources.cpu=1", "resources.memory=1", "shm_size=0.25",
               "termination_grace_period_seconds=10")

SCENARIOS = [
    Scenario("a FailJob exit code", ("max_restarts=2",), {0: ["run"], 1: [[78, 2]]}, {
        "conditions": [("FailureTarget", "PodFailurePolicy",
                        "Container worker for pod <pod> failed with exit code 78 matching FailJob rule at index 0"),
                       ("Failed", "PodFailurePolicy",
                        "Container worker for pod <pod> failed with exit code 78 matching FailJob rule at index 0")],
        "failed": 2, "succeeded": 0, "failedIndexes": "", "completedIndexes": ""}),
    Scenario("one crash with max_restarts=0", ("max_restarts=0",), {0: ["run"], 1: [[1, 2]]}, {
        "conditions": [("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                       ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")],
        "failed": 2, "succeeded": 0, "failedIndexes": "1", "completedIndexes": ""}),
    Scenario("the active deadline", ("active_deadline_seconds=8",), {0: ["run"], 1: ["run"]}, {
        "conditions": [("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline"),
                       ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")],
        "failed": 2, "succeeded": 0, "failedIndexes": "", "completedIndexes": ""}),
    Scenario("a victim is ignored and replaced after the back-off", ("max_restarts=0",),
             {0: [[0, 30]], 1: [[75, 2], [0, 2]]}, {
        "conditions": [("SuccessCriteriaMet", "SuccessPolicy", "Matched rules at index 0"),
                       ("Complete", "SuccessPolicy", "Matched rules at index 0")],
        "failed": 0, "succeeded": 2, "failedIndexes": "", "completedIndexes": "0,1"}),
    Scenario("a counted crash within max_restarts is replaced and the Job completes", ("max_restarts=1",),
             {0: [[0, 30]], 1: [[1, 2], [0, 2]]}, {
        "conditions": [("SuccessCriteriaMet", "SuccessPolicy", "Matched rules at index 0"),
                       ("Complete", "SuccessPolicy", "Matched rules at index 0")],
        "failed": 1, "succeeded": 2, "failedIndexes": "", "completedIndexes": "0,1"}),
    # index 0's victim ends at 1 s, so that its replacement (after the controller's 10 s back-off) runs well before
    # index 1's second crash ends the Job (6 s + 10 s + 6 s): at 4 s and 2 s both fell at 14 s, and on a busy machine
    # the Job failed before the replacement existed (failed 2, not 3: the rehearsal of 19c2aa7)
    Scenario("a crash on every start, its victim ignored, ends the Job", ("max_restarts=1",),
             {0: [[75, 1], "run"], 1: [[1, 6]]}, {
        "conditions": [("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                       ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")],
        "failed": 3, "succeeded": 0, "failedIndexes": "1", "completedIndexes": ""}),
]
# Replica groups: a group's crash loop fails its index (FailIndex on 80), the first group to succeed completes the Job.
SCENARIOS += [
    # the controller judges failed indexes before its successPolicy: with every other index failed, the last one's
    # success fails the Job (why maxFailedIndexes never lets all but one group fail: trainer_contract.replica_groups)
    Scenario("a FailIndex exit code, then the other index's success, fails the Job", ("max_restarts=3",),
             {0: [[0, 8]], 1: [[80, 2]]}, {
        "conditions": [("FailureTarget", "FailedIndexes", "Job has failed indexes"),
                       ("Failed", "FailedIndexes", "Job has failed indexes")],
        "failed": 1, "succeeded": 1, "failedIndexes": "1", "completedIndexes": "0"}, replica_groups_failing=1),
    Scenario("FailIndex on more indexes than maxFailedIndexes fails the Job", ("replicas=3", "max_restarts=3"),
             {0: ["run"], 1: [[80, 2]], 2: [[80, 4]]}, {
        "conditions": [("FailureTarget", "MaxFailedIndexesExceeded",
                        "Job has exceeded the specified maximal number of failed indexes"),
                       ("Failed", "MaxFailedIndexesExceeded",
                        "Job has exceeded the specified maximal number of failed indexes")],
        "failed": 3, "succeeded": 0, "failedIndexes": "1,2", "completedIndexes": ""}, replica_groups_failing=1),
]
# Not here: index 0 succeeding while another index still runs. Under torchrun it cannot: a finished agent waits in
# torchrun's exit barrier for the others (the built-in worker's followers finish first, by design).

POD_NAME = re.compile(r"\b(?:[a-z0-9-]+/)?[a-z][a-z0-9-]*-\d+-[a-z0-9]{5}\b")


def comparable(status: dict) -> dict:
    """The fields both executors report, pod names (random suffixes, namespaces) replaced by <pod>."""
    return {
        "conditions": [(c["type"], c.get("reason", ""), POD_NAME.sub("<pod>", c.get("message", "")))
                       for c in status.get("conditions") or [] if c.get("status", "True") == "True"],
        "failed": status.get("failed", 0),
        "succeeded": status.get("succeeded", 0),
        "failedIndexes": status.get("failedIndexes") or "",
        "completedIndexes": status.get("completedIndexes") or "",
    }


# What users see of a Job after a fault that a gang survives, as the real node's fault tests and their local-job
# counterparts each assert it of their Job: its conditions (with reasons and messages), what was counted, the failed
# indexes. Not which followers succeeded: once index 0 has, the successPolicy completes the Job, and a follower
# whose end the controller has not seen yet is terminated (on a busy node, after a restart, it can be).
def fault_outcome(status: dict) -> dict:
    seen = comparable(status)
    return {key: seen[key] for key in ("conditions", "failed", "failedIndexes")}


COMPLETED_BY_INDEX_0 = [("SuccessCriteriaMet", "SuccessPolicy", "Matched rules at index 0"),
                        ("Complete", "SuccessPolicy", "Matched rules at index 0")]
# a pod disrupted (evicted, preempted: the DisruptionTarget condition) and replaced: nothing counted
DISRUPTED_AND_REPLACED = {"conditions": COMPLETED_BY_INDEX_0, "failed": 0, "failedIndexes": ""}
# a worker process killed inside its pod: the launcher restarts the round in place, no pod fails
RESTARTED_IN_PLACE = DISRUPTED_AND_REPLACED
# a plain `kubectl delete pod`: no condition, so the pod's exit 143 counts against max_restarts
DELETED_AND_REPLACED = {**DISRUPTED_AND_REPLACED, "failed": 1}
