"""trainer_runtime.replica_groups.writes_the_model: which replica group writes the job's model at its end, and how
long the others wait for the Job to end them before one writes it in the first's stead."""

from __future__ import annotations

import time

import pytest

from trainer_runtime import replica_groups

pytest.importorskip("torchft", reason="replica groups need the [replicas] extra (torchft)")


def decide(last_part: int, under_job: bool, stopped_after: float | None, written: bool, monkeypatch,
           succession: float = 1.0) -> tuple[bool, float, list[str]]:
    """writes_the_model for a group in place ``last_part``, with a SIGTERM after ``stopped_after`` seconds (None:
    none comes); whether it writes, the seconds it took and what it said."""
    monkeypatch.setattr(replica_groups, "SUCCESSION_SECONDS", succession)
    if under_job:
        monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    else:
        monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    said: list[str] = []
    began = time.monotonic()

    def stopped() -> bool:
        return stopped_after is not None and time.monotonic() - began >= stopped_after

    writes = replica_groups.writes_the_model(last_part, stopped, lambda: written, "cpu", said.append, "group1")
    return writes, time.monotonic() - began, said


@pytest.mark.parametrize(("last_part", "under_job", "stopped_after", "written", "writes", "least", "most"), [
    (0, True, None, False, True, 0.0, 0.5),  # the last step's first group writes at once
    (0, False, None, False, True, 0.0, 0.5),
    (1, False, None, False, False, 0.0, 0.5),  # not under a Job (Slurm): the others end at once
    (1, True, 0.2, False, False, 0.2, 0.95),  # the Job completed with the writer and ended this pod, before its turn
    (1, True, None, True, False, 1.0, 3.0),  # no end, but the model is written: this group succeeds, writing nothing
    (1, True, None, False, True, 1.0, 3.0),  # the writer lost for good: the second group writes in its stead
    (2, True, None, False, True, 2.0, 4.0),  # the third after twice as long
])
def test_one_group_writes_the_model_and_the_others_wait_for_the_jobs_end_or_succeed_it_in_turn(
        monkeypatch, last_part, under_job, stopped_after, written, writes, least, most):
    wrote, seconds, said = decide(last_part, under_job, stopped_after, written, monkeypatch)
    assert wrote is writes
    assert least <= seconds < most, seconds
    if last_part and under_job:
        assert "waiting for the Job to complete with it" in said[0]
    if wrote and last_part:
        assert said[-1].endswith("no model is written: this group writes it")
