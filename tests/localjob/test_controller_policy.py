"""The Job controller's rules, as local-job applies them to the rendered Job (pure logic, no processes)."""

import pytest
import yaml

from generator.kubernetes import render_manifests, to_stream
from generator.resources import default_values_path
from generator.validation import validate_values
from generator.values import resolve_values
from localjob.controller import BACKOFF_CAP, JobController, PodRecord, backoff_delay, parse_indexes
from localjob.manifests import plan


def controller(*sets: str, tmp_path=None) -> JobController:
    values = validate_values(resolve_values(default_values_path(), [], sets))
    return JobController(plan(list(yaml.safe_load_all(to_stream(render_manifests(values))))), None, tmp_path)


def failed_pod(conditions=(), **codes) -> PodRecord:
    return PodRecord("mnist-train-1-abcde", 1, phase="Failed", exit_codes=dict(codes),
                     conditions=[{"type": c, "status": "True"} for c in conditions])


@pytest.mark.parametrize("record, action", [
    (failed_pod(worker=143, conditions=["DisruptionTarget"]), "Ignore"),  # preempted, evicted, drained
    (failed_pod(worker=75), "Ignore"),  # a victim of a peer's failure
    (failed_pod(worker=78), "FailJob"),  # bad configuration, found by the worker itself
    (failed_pod(**{"check-config": 78}), "FailJob"),  # ... or by the init container
    (failed_pod(worker=78, conditions=["DisruptionTarget"]), "FailJob"),  # rules apply in order
    (failed_pod(worker=1), "Count"),  # a crash: the root cause
    (failed_pod(worker=137), "Count"),  # killed (OOM, a node lost without a disruption condition)
    (failed_pod(worker=76), "Count"),  # the gang stalled
    (failed_pod(**{"check-config": 75}), "Count"),  # 75 is a victim's code only from the worker container
])
def test_pod_failure_policy_of_the_rendered_job(record, action):
    assert controller().policy_action(record) == action


def test_success_policy_lets_the_leader_decide():
    job = controller("replicas=4")
    job.succeeded = {1, 2, 3}
    assert job.success_met() is None
    job.succeeded = {0}
    assert job.success_met() == "Matched rules at index 0"


def test_indexes_and_back_off_follow_the_controller():
    assert parse_indexes("0") == {0} and parse_indexes("0,2-4, 7") == {0, 2, 3, 4, 7}
    # a real v1.36 controller waited 10, 22, 40, 80, 160, 321, 600 s before successive replacements
    assert [backoff_delay(10, n) for n in range(9)] == [0, 10, 20, 40, 80, 160, 320, 600, 600]
    assert BACKOFF_CAP == 600  # the controller's MaxJobPodFailureBackOff: 10 minutes


def test_the_back_off_is_per_index_with_backoff_limit_per_index_else_job_wide():
    per_index = controller("replicas=8")
    per_index.last_failure_of = {None: 100.0, 0: 100.0, 1: 100.0}
    per_index.index_absolute.update({0: 1, 1: 1})  # one gang restart: every index failed once
    per_index.failures_since_success = 8
    assert per_index.ready_at(0) == 110.0  # 10 s, not the 10 min that 8 failed pods cost job-wide
    job_wide = controller("replicas=8")
    del job_wide.plan.spec["backoffLimitPerIndex"]
    job_wide.last_failure_of = per_index.last_failure_of
    job_wide.failures_since_success = 8
    assert job_wide.ready_at(0) == 100.0 + BACKOFF_CAP


def test_every_difference_local_job_reports_is_in_the_docs():
    from localjob.controller import DIFFERENCES
    from tests.conftest import ROOT

    docs = " ".join((ROOT / "docs" / "reliability.md").read_text().split())
    assert [text for text in DIFFERENCES if text not in docs] == []


def test_indexes_are_written_in_the_apis_notation():
    from localjob.controller import format_indexes

    # the controller's orderedIntervals.String(): a run of two is "a,b", not "a-b" (the control-plane tier saw it)
    assert [format_indexes(s) for s in (set(), {1}, {0, 1}, {0, 1, 2}, {0, 2, 3, 4, 7, 8})] == [
        "", "1", "0,1", "0-2", "0,2-4,7,8"]
    assert parse_indexes(format_indexes({0, 2, 3, 4, 7})) == {0, 2, 3, 4, 7}
