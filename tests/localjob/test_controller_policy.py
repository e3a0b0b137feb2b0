"""The Job controller's rules as local-job applies them, one policy per file (pure logic, no processes):
podFailurePolicy (failure_policy.py), successPolicy and the index notation (success_policy.py), the back-off
(backoff.py) and the counting of a gang's failures (accounting.py), each against the rendered Job."""

import pytest
import yaml

from generator.resources import default_values_path
from generator.targets.kubernetes import render_manifests, to_stream
from generator.validation import validate_values
from generator.values import resolve_values
from localjob import failure_policy, success_policy
from localjob.accounting import Accounting, Ended
from localjob.backoff import BACKOFF_CAP, backoff_delay
from localjob.manifests import plan
from localjob.records import PodRecord
from localjob.success_policy import format_indexes, parse_indexes


def rendered(*sets: str):
    values = validate_values(resolve_values(default_values_path(), [], sets))
    return plan(list(yaml.safe_load_all(to_stream(render_manifests(values)))))


def failed_pod(conditions=(), **codes) -> PodRecord:
    return PodRecord("mnist-train-1-abcde", 1, phase="Failed", exit_codes=dict(codes),
                     conditions=[{"type": c, "status": "True"} for c in conditions])


@pytest.mark.parametrize("record, action", [
    (failed_pod(worker=143, conditions=["DisruptionTarget"]), "Ignore"),  # preempted, evicted, drained
    (failed_pod(worker=75), "Ignore"),  # a victim of a peer's failure
    (failed_pod(worker=78), "FailJob"),  # bad configuration, found by the worker itself
    (failed_pod(**{"check-config": 78}), "FailJob"),  # ... or by the init container
    (failed_pod(worker=79), "FailJob"),  # fewer GPUs than asked for, without CPU fallback
    (failed_pod(worker=78, conditions=["DisruptionTarget"]), "FailJob"),  # rules apply in order
    (failed_pod(worker=1), "Count"),  # a crash: the root cause
    (failed_pod(worker=137), "Count"),  # killed (OOM, a node lost without a disruption condition)
    (failed_pod(worker=76), "Count"),  # the gang stalled
    (failed_pod(**{"check-config": 75}), "Count"),  # 75 is a victim's code only from the worker container
    (failed_pod(**{"check-config": 0, "worker": 0}), "Count"),  # exit 0 never matches an exit-code rule
])
def test_pod_failure_policy_of_the_rendered_job(record, action):
    rules = rendered().spec["podFailurePolicy"]["rules"]
    assert failure_policy.match(rules, record, "default")[0] == action


def test_a_fail_job_match_is_worded_as_the_controller_words_it():
    rules = rendered().spec["podFailurePolicy"]["rules"]
    assert failure_policy.match(rules, failed_pod(worker=78), "ml") == (
        "FailJob", "Container worker for pod ml/mnist-train-1-abcde failed with exit code 78 matching FailJob rule "
                   "at index 0")
    assert failure_policy.match(rules, failed_pod(worker=143, conditions=["DisruptionTarget"]), "ml")[1] == (
        "Pod ml/mnist-train-1-abcde has condition DisruptionTarget matching Ignore rule at index 1")


@pytest.mark.parametrize("rules, succeeded, message", [
    ([{"succeededIndexes": "0"}], {1, 2, 3}, None),  # the leader decides (the rendered Job's rule)
    ([{"succeededIndexes": "0"}], {0}, "Matched rules at index 0"),
    ([{"succeededIndexes": "0-2", "succeededCount": 2}], {1, 5}, None),
    ([{"succeededIndexes": "0-2", "succeededCount": 2}], {1, 2, 5}, "Matched rules at index 0"),
    ([{"succeededCount": 3}], {4, 5}, None),
    ([{"succeededIndexes": "7"}, {"succeededCount": 2}], {4, 5}, "Matched rules at index 1"),
])
def test_success_policy(rules, succeeded, message):
    assert success_policy.met(rules, succeeded) == message


def test_the_rendered_job_lets_the_leader_decide():
    assert rendered("replicas=4").spec["successPolicy"]["rules"] == [{"succeededIndexes": "0"}]


@pytest.mark.parametrize("indexes, text", [
    # the controller's orderedIntervals.String(): a run of two is "a,b", not "a-b" (the control-plane tier saw it)
    (set(), ""), ({1}, "1"), ({0, 1}, "0,1"), ({0, 1, 2}, "0-2"), ({0, 2, 3, 4, 7, 8}, "0,2-4,7,8"),
])
def test_indexes_are_written_in_the_apis_notation(indexes, text):
    assert format_indexes(indexes) == text and parse_indexes(text) == indexes
    assert parse_indexes("0,2-4, 7") == {0, 2, 3, 4, 7}


def test_the_back_off_follows_the_controller():
    # a real v1.36 controller waited 10, 22, 40, 80, 160, 321, 600 s before successive replacements
    assert [backoff_delay(10, n) for n in range(9)] == [0, 10, 20, 40, 80, 160, 320, 600, 600]
    assert BACKOFF_CAP == 600  # the controller's MaxJobPodFailureBackOff: 10 minutes


def one_gang_restart(counts: Accounting, pods: int = 8, now: float = 100.0) -> None:
    """Index 0 crashed (counted) and the other pods were its victims (ignored)."""
    counts.pod_failed(0, "Count", "", now)
    for index in range(1, pods):
        counts.pod_failed(index, "Ignore", "", now)


def test_the_back_off_is_per_index_with_backoff_limit_per_index_else_job_wide():
    per_index = Accounting.of(rendered("replicas=8"))
    one_gang_restart(per_index)
    assert per_index.ready_at(0, 10) == 110.0  # 10 s, not the 10 min that 8 failed pods cost job-wide
    job = rendered("replicas=8")
    del job.spec["backoffLimitPerIndex"]
    job_wide = Accounting.of(job)
    one_gang_restart(job_wide)
    assert job_wide.ready_at(0, 10) == 100.0 + BACKOFF_CAP


# (backoffLimit, backoffLimitPerIndex, maxFailedIndexes, completions), the failed pods (index, action) in
# order, and what the last of them did: the Job's end, or whether the index gets a replacement
CASES = {
    "a victim is replaced and not counted": ((3, 3, 0, 2), [(1, "Ignore")], True, 0, set()),
    "a crash is counted and replaced": ((3, 3, 0, 2), [(0, "Count")], True, 1, set()),
    "FailJob ends the Job and counts": ((3, 3, 0, 2), [(0, "FailJob")],
                                        Ended(False, "PodFailurePolicy", "matched"), 1, set()),
    "past the Job-wide limit": ((1, 3, 0, 2), [(0, "Count"), (1, "Count")],
                                Ended(False, "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                                2, set()),
    # the per-index limit is passed in the same step: the index is in failedIndexes all the same
    "both limits in one step": ((1, 1, 0, 2), [(0, "Count"), (0, "Count")],
                                Ended(False, "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                                2, {0}),
    "past an index's limit, more failed indexes than allowed": (
        (9, 0, 0, 2), [(0, "Count")],
        Ended(False, "MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes"),
        1, {0}),
    "past an index's limit, others still to go": ((9, 0, 1, 3), [(0, "Count")], False, 1, {0}),
    "every index failed or succeeded": ((9, 0, 5, 2), [(0, "Count"), (1, "Count")],
                                        Ended(False, "FailedIndexes", "Job has failed indexes"), 2, {0, 1}),
}


@pytest.mark.parametrize("case", CASES)
def test_gang_accounting(case):
    (limit, per_index, max_failed, completions), failures, outcome, failed, failed_indexes = CASES[case]
    counts = Accounting(completions, limit, per_index, max_failed)
    results = [counts.pod_failed(index, action, "matched", 1.0) for index, action in failures]
    assert results[-1] == outcome
    assert counts.failed == failed and counts.failed_indexes == failed_indexes
    assert counts.ignored == sum(1 for _, action in failures if action == "Ignore")


def test_success_resets_the_job_wide_back_off_and_settles_the_job():
    counts = Accounting(2, 6)
    counts.pod_failed(1, "Count", "", 5.0)
    assert counts.failures_since_success == 1 and counts.replacing(1) == 2 and counts.restarts == {0: 0, 1: 1}
    counts.pod_succeeded(0)
    assert counts.failures_since_success == 0 and counts.settled() is None
    counts.pod_succeeded(1)
    assert counts.settled() == Ended(True, "CompletionsReached", "Reached expected number of succeeded pods")


def test_every_difference_local_job_reports_is_in_the_docs():
    from localjob.controller import DIFFERENCES
    from tests.conftest import ROOT

    docs = " ".join((ROOT / "docs" / "reliability.md").read_text().split())
    assert [text for text in DIFFERENCES if text not in docs] == []


class StoppedContainer:
    """A container process that has already ended with ``code`` (a wait status: -15 for SIGTERM)."""

    def __init__(self, name: str, code: int | None):
        self.run = type("Run", (), {"name": name})()
        self.code = code

    def terminate(self, grace: float) -> None:
        pass

    def poll(self) -> int | None:
        return self.code


@pytest.mark.parametrize("container, remaining, code, phase, exit_code", [
    ("worker", [], 0, "Succeeded", 0),  # finished (or stopped cleanly) as the Job ended: the kubelet's Succeeded
    ("worker", [], -15, "Failed", 143),  # stopped by SIGTERM
    ("worker", [], None, "Failed", 137),  # still running when the grace period ran out: SIGKILL
    ("check-config", ["worker"], 0, "Failed", 0),  # the main container never ran
])
def test_a_terminated_pod_takes_the_phase_its_exit_codes_give(container, remaining, code, phase, exit_code):
    from localjob.controller import LocalPod

    pod = LocalPod.__new__(LocalPod)
    pod.record = PodRecord("mnist-train-1-abcde", 1, phase="Running")
    pod.current, pod.queue = StoppedContainer(container, code), list(remaining)
    pod.terminate(15)
    assert (pod.record.phase, pod.record.exit_codes[container]) == (phase, exit_code)
