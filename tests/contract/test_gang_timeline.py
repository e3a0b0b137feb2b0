"""What each fault cost, from the notes the launchers and rank 0 leave on the volume (trainer_contract/gang_timeline.py),
against real files: table-driven for the phases and the kinds, and which node explains a round (its one summary);
the end-to-end runs are under local-job (tests/localjob/test_gang_on_local_job.py) and in bench/goodput.py."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer_contract import exit_codes
from trainer_contract.gang_ledger import GangLedger
from trainer_contract.gang_rounds import GangRounds
from trainer_contract.gang_timeline import KINDS, PHASES, Fault, RoundFailure, Timeline
from trainer_launcher.recovery import InPlaceRecovery

T = 1_700_000_000.0  # a wall-clock origin


def timeline_with(tmp_path, failure: RoundFailure, restore: float | None = 12.0) -> Timeline:
    """Round 1 resumed at T and failed as ``failure`` says; round 2's rank 0 began to restore at T + ``restore``."""
    timeline = Timeline(tmp_path, "job")
    timeline.resumed(1, T)
    assert timeline.round_failed(1, failure)
    if restore is not None:
        timeline.restore_began(2, T + restore)
    return timeline


def failure(first: float, judged: float, kind: str = "worker failed", code: int | None = 137) -> RoundFailure:
    return RoundFailure(T + first, T + judged, kind, code)


@pytest.mark.parametrize("summary, progress, phases", [
    # a worker of node 1 killed 10 s in, 4 s after the round's checkpoint: judged at once by its own node
    (failure(10.0, 10.0), (1, T + 6.0), {"recompute": 4.0, "detect": 0.0, "restart": 2.0, "restore": 1.0}),
    # no checkpoint in the failed round: all its training is done again
    (failure(10.0, 10.0, code=1), (0, T - 30.0), {"recompute": 10.0, "detect": 0.0, "restart": 2.0, "restore": 1.0}),
    # node 1 lost whole (its node died): index 0 noticed at 9 s and judged once its heartbeat went stale
    (failure(9.0, 11.0, "pod lost", None), (1, T + 8.0),
     {"recompute": 1.0, "detect": 2.0, "restart": 1.0, "restore": 1.0}),
    # node 1 stopped (SIGTERM: preemption) after the gang's checkpoint of the stop
    (failure(10.0, 10.0, "pod stopped", 143), (1, T + 9.9),
     {"recompute": 0.1, "detect": 0.0, "restart": 2.0, "restore": 1.0}),
    # every pod a victim: index 0 judged once every note was in
    (failure(10.0, 10.5, "every worker a victim", 75), None,
     {"recompute": 10.0, "detect": 0.5, "restart": 1.5, "restore": 1.0}),
])
def test_a_fault_is_accounted_for_in_phases_that_add_up_to_what_it_lost(tmp_path, summary, progress, phases):
    timeline = timeline_with(tmp_path, summary)
    fault = timeline.account(2, progress=progress, now=T + 13.0)
    assert fault is not None and (fault.kind, fault.code, fault.round, fault.number) == (summary.kind, summary.code, 1, 1)
    assert {phase: round(getattr(fault, phase), 3) for phase in phases} == phases
    # the lost interval: from the last moment whose work was kept to the resume
    kept = max(T, progress[1]) if progress and progress[0] == 1 else T
    assert fault.lost == pytest.approx(T + 13.0 - kept)
    assert timeline.faults() == [fault]


def test_each_fault_once_and_goodput_over_the_jobs_wall_time(tmp_path):
    timeline = timeline_with(tmp_path, failure(10.0, 10.1))
    first = timeline.account(2, (1, T + 6.0), now=T + 13.0)
    assert timeline.account(2, (1, T + 6.0), now=T + 14.0) is None  # round 2's rank 0 started twice
    timeline.round_failed(2, failure(40.0, 40.0))
    timeline.restore_began(3, T + 41.0)
    second = timeline.account(3, (2, T + 39.0), now=T + 42.0)
    assert second is not None and second.number == 2 and second.lost == pytest.approx(3.0)
    assert timeline.first_step() == T
    assert timeline.goodput(now=T + 100.0) == pytest.approx(1 - (first.lost + second.lost) / 100.0)
    assert "; goodput 90%" in second.line(timeline.goodput(now=T + 100.0))


def test_the_first_round_and_a_round_nobody_explained_account_for_nothing(tmp_path):
    timeline = Timeline(tmp_path, "job")
    assert timeline.account(1, None, now=T) is None
    assert timeline.account(2, None, now=T + 5) is None  # round 1 ended without a summary (a volume that refused it)
    assert timeline.goodput(now=T + 10) == 1.0


def test_the_first_summary_of_a_round_stands(tmp_path):
    timeline = Timeline(tmp_path, "job")
    assert timeline.round_failed(1, failure(10.0, 10.0))
    assert not timeline.round_failed(1, failure(11.0, 11.0, "pod lost", None))  # a later explainer: passed over
    assert timeline.failure(1) == failure(10.0, 10.0)


@pytest.mark.parametrize("planted", [
    "not json", '{"first": 1, "judged": 2, "kind": "worker failed"}', '["first", "judged", "kind", "code"]',
    '{"first": 1, "judged": 2, "kind": "rm -rf /", "code": 1}', '{"first": NaN, "judged": 2, "kind": "pod lost", "code": null}',
    '{"first": true, "judged": 2, "kind": "pod lost", "code": null}', '{"first": 1, "judged": 2, "kind": "pod lost", "code": "1"}',
    "fifo", "link to /dev/zero", "huge"])
def test_a_summary_that_is_not_ours_is_passed_over(tmp_path, planted):
    timeline = Timeline(tmp_path, "job")
    timeline.resumed(1, T)
    path = timeline.directory / "1.failed"
    if planted == "fifo":
        os.mkfifo(path)
    elif planted == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif planted == "huge":
        path.write_text(json.dumps({"first": T, "judged": T, "kind": "pod lost", "code": None, "pad": "x" * 4096}))
    else:
        path.write_text(planted)
    (timeline.directory / "faults.jsonl").write_text('{"not": "a fault"}\nnot json\n')
    assert timeline.failure(1) is None and timeline.account(2, None, now=T + 13.0) is None
    assert not timeline.round_failed(1, failure(10.0, 10.0))  # and the planted file is not replaced


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_where_a_summary_goes_read_as_one_of_ours_or_none(tmp_path_factory, planted):
    timeline = Timeline(tmp_path_factory.mktemp("summary"), "job")
    timeline.directory.mkdir(parents=True)
    (timeline.directory / "1.failed").write_bytes(planted)
    read = timeline.failure(1)
    assert read is None or (read.kind in KINDS and isinstance(read.first, float) and isinstance(read.judged, float))


@given(st.floats(min_value=0, max_value=4e9), st.floats(min_value=0, max_value=1e4), st.sampled_from(KINDS),
       st.one_of(st.none(), st.integers(min_value=0, max_value=255)))
@settings(max_examples=100, deadline=None)
def test_a_summary_reads_back_as_written(tmp_path_factory, first, delay, kind, code):
    timeline = Timeline(tmp_path_factory.mktemp("summary"), "job")
    written = RoundFailure(first, first + delay, kind, code)
    assert timeline.round_failed(1, written) and timeline.failure(1) == written


def test_the_line_says_what_failed_and_what_it_cost():
    fault = Fault(number=3, round=3, kind="worker failed", code=137, detect=0.2, restart=1.5, restore=1.2,
                  recompute=1.2, at=T)
    assert fault.line(0.93) == ("fault 3: worker failed (exit 137) in round 3; 4.1 s lost: 0.2 detect, 1.5 restart, "
                                "1.2 restore, 1.2 recompute; goodput 93%")


def test_a_fault_during_the_recovery_from_another_lengthens_its_restart(tmp_path):
    timeline = timeline_with(tmp_path, failure(10.0, 10.1))  # round 1 failed, round 2 restoring...
    timeline.round_failed(2, failure(15.0, 15.0))  # ...failed before it trained (no resume of round 2)
    timeline.restore_began(3, T + 20.0)
    fault = timeline.account(3, (1, T + 6.0), now=T + 21.0)
    assert fault is not None and (fault.number, fault.round, fault.through, fault.kind) == (1, 1, 2, "worker failed")
    assert fault.lost == pytest.approx(21.0 - 6.0)  # from round 1's checkpoint to round 3's first step
    assert fault.restart == pytest.approx(20.0 - 10.1)
    assert timeline.account(3, (1, T + 6.0), now=T + 22.0) is None


def test_the_workers_rank_0_accounts_for_the_fault_once_and_the_other_ranks_never(tmp_path):
    from trainer_runtime.goodput import Goodput

    gang = tmp_path / ".gang"
    timeline = Timeline(gang, "job")
    timeline.resumed(1, T)
    timeline.round_failed(1, failure(10.0, 10.0))
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


def test_a_resume_reads_one_summary_whatever_the_jobs_life(tmp_path, monkeypatch):
    """40 rounds failed and were accounted for; round 42's rank 0 reads round 41's summary and a few notes of its
    own, by name (no listing of the rounds): the accounting at a resume does not grow with the job's life."""
    from trainer_contract import gang_timeline

    timeline = Timeline(tmp_path, "job")
    for generation in range(1, 42):
        timeline.resumed(generation, T + generation * 100)
        timeline.round_failed(generation, failure(generation * 100 + 50, generation * 100 + 50))
        timeline.restore_began(generation + 1, T + generation * 100 + 60)
        if generation < 41:
            timeline.account(generation + 1, None, now=T + generation * 100 + 70)
    reads = []
    real = gang_timeline.read_note
    monkeypatch.setattr(gang_timeline, "read_note", lambda path, *a, **k: reads.append(path.name) or real(path, *a, **k))
    fault = timeline.account(42, None, now=T + 4170)
    assert fault is not None and fault.round == 41 and fault.number == 41 and fault.code == 137
    assert [name for name in reads if name.endswith(".failed")] == ["41.failed"]
    assert len(reads) < 10


# -- which node explains a round: one summary per round, whatever the gang's size ------------------------------
NODES = 8


def gang_of(tmp_path, nodes: int = NODES) -> list[InPlaceRecovery]:
    """A gang's launchers, in round 1 (joined), as InPlaceRecovery decides after a failed round."""
    deciders = []
    for node in range(nodes):
        ledger = GangLedger(tmp_path, node, nodes)
        decider = InPlaceRecovery(GangRounds(tmp_path, node, ledger.token, "job"), ledger, 3, print, print)
        decider.generation = 1
        deciders.append(decider)
    return deciders


def summaries(tmp_path) -> list[str]:
    return sorted(path.name for path in (tmp_path / ".gang" / "timeline" / "job").glob("*.failed*"))


@pytest.mark.parametrize("codes, signalled, kind, code", [
    # node 5's worker crashed; every other pod's workers were stopped by the round alarm (victims)
    ({5: 137}, False, "worker failed", 137),
    ({5: 1}, False, "worker failed", 1),
    # node 5's launcher got SIGTERM (preemption): its pod ends; the others go on in place
    ({5: exit_codes.TERMINATED}, True, "pod stopped", exit_codes.TERMINATED),
    # node 5's worker stopped by a SIGTERM of someone else's: it explains the round
    ({5: exit_codes.TERMINATED}, False, "pod stopped", exit_codes.TERMINATED),
    # every pod a victim: index 0 explains it, once every note is in
    ({}, False, "every worker a victim", exit_codes.PEER_LOST),
])
def test_a_failed_round_has_one_summary_by_the_node_that_explains_it(tmp_path, monkeypatch, codes, signalled, kind,
                                                                     code):
    from trainer_launcher import recovery as recovery_module

    monkeypatch.setattr(recovery_module, "VERDICT_WAIT_SECONDS", 0.2)  # a stop is never judged: index 0's wait runs out
    gang = gang_of(tmp_path)
    # the followers first (index 0 reads their notes), each as its own round ended
    for decider in gang[1:] + gang[:1]:
        node = decider.ledger.node
        code_here = codes.get(node, exit_codes.PEER_LOST)
        if decider.after(code_here, signalled and node in codes) is not None:
            decider.ledger.note(code_here)  # a pod that ends notes how (the launcher's exit, trainer_launcher.launch)
    assert summaries(tmp_path) == ["1.failed"]  # one note for the round, not one per node
    written = Timeline(tmp_path / ".gang", "job").failure(1)
    assert written is not None and (written.kind, written.code) == (kind, code)
    assert written.first <= written.judged


def test_index_0_explains_a_round_in_which_a_pod_vanished_whole(tmp_path, monkeypatch):
    from trainer_contract import gang_ledger

    monkeypatch.setattr(gang_ledger, "WAIT_SECONDS", 0.3)
    gang = gang_of(tmp_path, 3)
    gang[1].after(exit_codes.PEER_LOST, False)  # node 2 noted nothing: lost with its pod
    monkeypatch.setattr(gang[0].ledger, "attempt_ending", lambda: gang_ledger.VANISHED)
    assert gang[0].after(exit_codes.PEER_LOST, False) is None
    written = Timeline(tmp_path / ".gang", "job").failure(1)
    assert written is not None and (written.kind, written.code) == ("pod lost", None)


def test_index_0s_successor_explains_the_round_its_predecessor_was_lost_in(tmp_path):
    """Index 0 lost whole in round 1 (after its restore): nobody explained the round; its successor, opening round 2,
    explains it as a pod lost from the predecessor's last heartbeat; a round another node explained stays as it is."""
    gang = tmp_path / ".gang"
    predecessor = gang_of(tmp_path, 2)[0]
    predecessor.rounds.announce()
    Timeline(gang, "job").restore_began(1, T)
    (gang / "0.alive").write_text("lost 7\n")
    os.utime(gang / "0.alive", (T + 30.0, T + 30.0))
    successor_ledger = GangLedger(tmp_path, 0, 2)
    successor_ledger.start()
    successor_ledger.stop()
    successor = InPlaceRecovery(GangRounds(tmp_path, 0, successor_ledger.token, "job"), successor_ledger, 3, print,
                                print)
    assert successor.enter(60.0, lambda: None) is None and successor.generation == 2
    assert Timeline(gang, "job").failure(1) == RoundFailure(T + 30.0, T + 30.0, "pod lost", None)
    # a round of another Job's on the same volume (no restore of this Job's) is not this Job's to explain
    other = GangRounds(tmp_path / "other", 0, "x", "job")
    other.announce()
    ledger = GangLedger(tmp_path / "other", 0, 2)
    (tmp_path / "other" / ".gang" / "0.alive").write_text("lost 7\n")
    ledger.start()
    ledger.stop()
    assert InPlaceRecovery(GangRounds(tmp_path / "other", 0, ledger.token, "job"), ledger, 3, print,
                           print).enter(60.0, lambda: None) is None
    assert Timeline(tmp_path / "other" / ".gang", "job").failure(1) is None
