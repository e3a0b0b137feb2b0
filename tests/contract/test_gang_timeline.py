"""What each fault cost, from the notes the launchers and rank 0 leave on the volume (trainer_contract/gang_timeline.py),
against real files: table-driven for the phases and the kinds; the end-to-end runs are under local-job
(tests/localjob/test_gang_on_local_job.py) and in bench/goodput.py."""

from __future__ import annotations

import json

import pytest

from trainer_contract.gang_timeline import PHASES, Fault, Timeline

T = 1_700_000_000.0  # a wall-clock origin


def timeline_with(tmp_path, failed: dict[int, tuple[float, int]], restore: float | None = 12.0) -> Timeline:
    """Round 1 resumed at T, failed on the nodes of ``failed`` (node: (T + seconds, code)); round 2's rank 0 began
    to restore at T + ``restore``."""
    timeline = Timeline(tmp_path, "job")
    timeline.resumed(1, T)
    for node, (seconds, code) in failed.items():
        timeline.round_failed(1, node, code, T + seconds)
    if restore is not None:
        timeline.restore_began(2, T + restore)
    return timeline


@pytest.mark.parametrize("failed, progress, kind, code, phases", [
    # a worker of node 1 killed 10 s in, 4 s after the round's checkpoint; node 0's worker a victim 0.1 s later
    ({1: (10.0, 137), 0: (10.1, 75)}, (1, T + 6.0), "worker failed", 137,
     {"recompute": 4.0, "detect": 0.1, "restart": 1.9, "restore": 1.0}),
    # no checkpoint in the failed round: all its training is done again
    ({1: (10.0, 1), 0: (10.5, 75)}, (0, T - 30.0), "worker failed", 1,
     {"recompute": 10.0, "detect": 0.5, "restart": 1.5, "restore": 1.0}),
    # node 1 left no note: lost whole (its node died); node 0's worker noticed
    ({0: (10.0, 75)}, (1, T + 8.0), "pod lost", None, {"recompute": 2.0, "detect": 0.0, "restart": 2.0, "restore": 1.0}),
    # node 1 stopped (SIGTERM: preemption) after the gang's checkpoint of the stop
    ({1: (10.0, 143), 0: (10.2, 75)}, (1, T + 9.9), "pod stopped", 143,
     {"recompute": 0.1, "detect": 0.2, "restart": 1.8, "restore": 1.0}),
    ({1: (10.0, 75), 0: (10.0, 75)}, None, "every worker a victim", 75,
     {"recompute": 10.0, "detect": 0.0, "restart": 2.0, "restore": 1.0}),
])
def test_a_fault_is_accounted_for_in_phases_that_add_up_to_what_it_lost(tmp_path, failed, progress, kind, code,
                                                                         phases):
    timeline = timeline_with(tmp_path, failed)
    fault = timeline.account(2, nodes=2, progress=progress, now=T + 13.0)
    assert fault is not None and (fault.kind, fault.code, fault.round, fault.number) == (kind, code, 1, 1)
    assert {phase: round(getattr(fault, phase), 3) for phase in phases} == phases
    # the lost interval: from the last moment whose work was kept to the resume
    kept = max(T, progress[1]) if progress and progress[0] == 1 else T
    assert fault.lost == pytest.approx(T + 13.0 - kept)
    assert timeline.faults() == [fault]


def test_each_fault_once_and_goodput_over_the_jobs_wall_time(tmp_path):
    timeline = timeline_with(tmp_path, {1: (10.0, 137), 0: (10.1, 75)})
    first = timeline.account(2, 2, (1, T + 6.0), now=T + 13.0)
    assert timeline.account(2, 2, (1, T + 6.0), now=T + 14.0) is None  # round 2's rank 0 started twice
    timeline.round_failed(2, 0, 137, T + 40.0)
    timeline.round_failed(2, 1, 75, T + 40.0)
    timeline.restore_began(3, T + 41.0)
    second = timeline.account(3, 2, (2, T + 39.0), now=T + 42.0)
    assert second is not None and second.number == 2 and second.lost == pytest.approx(3.0)
    assert timeline.first_step() == T
    assert timeline.goodput(now=T + 100.0) == pytest.approx(1 - (first.lost + second.lost) / 100.0)
    assert "; goodput 90%" in second.line(timeline.goodput(now=T + 100.0))


def test_the_first_round_and_a_round_after_no_failure_account_for_nothing(tmp_path):
    timeline = Timeline(tmp_path, "job")
    assert timeline.account(1, 2, None, now=T) is None
    assert timeline.account(2, 2, None, now=T + 5) is None  # round 1 ended without a failure note (a stop of all)
    assert timeline.goodput(now=T + 10) == 1.0


def test_notes_that_are_not_ours_are_passed_over(tmp_path):
    timeline = timeline_with(tmp_path, {1: (10.0, 137)})
    directory = tmp_path / "timeline" / "job"
    (directory / "1.failed.0").write_text("yesterday 75\n")  # not a time: no note from node 0
    (directory / "1.failed.x").write_text("1 2\n")
    (directory / "faults.jsonl").write_text('{"not": "a fault"}\nnot json\n')
    fault = timeline.account(2, 2, None, now=T + 13.0)
    assert fault is not None and fault.kind == "pod lost" and fault.number == 1
    assert [json.loads(line)["round"] for line in (directory / "faults.jsonl").read_text().splitlines()[2:]] == [1]


def test_the_line_says_what_failed_and_what_it_cost():
    fault = Fault(number=3, round=3, kind="worker failed", code=137, detect=0.2, restart=1.5, restore=1.2,
                  recompute=1.2, at=T)
    assert fault.line(0.93) == ("fault 3: worker failed (exit 137) in round 3; 4.1 s lost: 0.2 detect, 1.5 restart, "
                                "1.2 restore, 1.2 recompute; goodput 93%")


def test_a_fault_during_the_recovery_from_another_lengthens_its_restart(tmp_path):
    timeline = timeline_with(tmp_path, {1: (10.0, 137), 0: (10.1, 75)})  # round 1 failed, round 2 restoring...
    timeline.round_failed(2, 0, 137, T + 15.0)  # ...failed before it trained (no resume of round 2)
    timeline.round_failed(2, 1, 75, T + 15.1)
    timeline.restore_began(3, T + 20.0)
    fault = timeline.account(3, 2, (1, T + 6.0), now=T + 21.0)
    assert fault is not None and (fault.number, fault.round, fault.kind) == (1, 1, "worker failed")
    assert fault.lost == pytest.approx(21.0 - 6.0)  # from round 1's checkpoint to round 3's first step
    assert fault.restart == pytest.approx(20.0 - 10.1)
    assert timeline.account(3, 2, (1, T + 6.0), now=T + 22.0) is None


def test_the_workers_rank_0_accounts_for_the_fault_once_and_the_other_ranks_never(tmp_path):
    from trainer_runtime.goodput import Goodput

    gang = tmp_path / ".gang"
    timeline = Timeline(gang, "job")
    timeline.resumed(1, T)
    timeline.round_failed(1, 0, 137, T + 10.0)
    timeline.round_failed(1, 1, 75, T + 10.1)
    environ = {"INDEXED_TRAINER_GANG_PROGRESS": str(gang / "progress"), "INDEXED_TRAINER_GANG_ROUND": "2",
               "INDEXED_TRAINER_JOB_UID": "job", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    said: list[str] = []
    follower = Goodput({**environ, "RANK": "1"})
    follower.restore_began()
    assert follower.resumed(said.append) is None and follower.summary() == {} and not said
    leader = Goodput({**environ, "RANK": "0"})
    leader.restore_began()
    fault = leader.resumed(said.append)
    assert fault is not None and fault.kind == "worker failed" and said == [fault.line(leader.goodput())]
    summary = leader.summary()
    assert summary["faults"] == 1 and 0 <= summary["goodput"] < 1 and set(summary["fault_seconds"]) == set(PHASES)
    assert Goodput({**environ, "RANK": "0"}).resumed(said.append) is None  # its second start: accounted already


def test_a_resume_reads_the_notes_of_the_round_it_recovers_from_not_of_every_round(tmp_path, monkeypatch):
    """40 rounds of 32 nodes failed and were accounted for; round 42's rank 0 reads round 41's 32 notes (and a few
    of its own), not 1,300: the accounting at a resume does not grow with the job's life."""
    from trainer_contract import gang_timeline

    timeline = Timeline(tmp_path, "job")
    for generation in range(1, 41):
        timeline.resumed(generation, T + generation * 100)
        for node in range(32):
            timeline.round_failed(generation, node, 75 if node else 137, T + generation * 100 + 50)
        timeline.restore_began(generation + 1, T + generation * 100 + 60)
        timeline.account(generation + 1, 32, None, now=T + generation * 100 + 70)
    timeline.resumed(41, T + 4100)
    for node in range(32):
        timeline.round_failed(41, node, 75 if node else 137, T + 4150)
    timeline.restore_began(42, T + 4160)
    reads = []
    real = gang_timeline.read_note
    monkeypatch.setattr(gang_timeline, "read_note", lambda path, *a, **k: reads.append(path.name) or real(path, *a, **k))
    fault = timeline.account(42, 32, None, now=T + 4170)
    assert fault is not None and fault.round == 41 and fault.number == 41 and fault.code == 137
    assert sum(name.endswith(tuple(f".failed.{node}" for node in range(32))) for name in reads) == 32
    assert len(reads) < 40
