"""In-place recovery's rounds on the shared volume (trainer_contract.gang_rounds) and the launcher's decision after a
failed round (trainer_launcher.recovery), against real files and threads; the end-to-end runs are under local-job
(tests/localjob/test_local_job_faults.py, test_gang_on_local_job.py)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer_contract import exit_codes, gang_rounds
from trainer_contract.gang_ledger import GangLedger
from trainer_contract.gang_rounds import (
    LEAVE_AFTER_VARIABLE,
    NODE_NAME_VARIABLE,
    PROGRESS_VARIABLE,
    GangRounds,
    Verdict,
    in_place_settings,
    job_identity,
    note_progress,
)
from trainer_launcher.recovery import InPlaceRecovery


def alive(directory, token: str) -> None:
    (directory / ".gang").mkdir(parents=True, exist_ok=True)
    (directory / ".gang" / "0.alive").write_text(f"{token} 1\n")


def test_a_node_joins_a_round_announced_by_the_live_index_0_and_only_once(tmp_path):
    leader = GangRounds(tmp_path, 0, "zero-a", "job")
    follower = GangRounds(tmp_path, 1, "one-a", "job")
    assert follower.open_round() is None  # nothing announced
    alive(tmp_path, "zero-a")
    assert leader.announce() == 1
    assert follower.open_round() == 1
    follower.mark_joined(1)
    assert follower.open_round() is None  # it was in round 1: it waits for round 2
    assert GangRounds(tmp_path, 1, "one-b", "job").open_round() is None  # so does its successor
    assert leader.announce() == 2 and follower.open_round() == 2


def test_a_round_announced_by_an_index_0_that_has_died_is_nobodys(tmp_path):
    GangRounds(tmp_path, 0, "zero-a", "job").announce()
    alive(tmp_path, "zero-b")  # another index 0 counts now: the old one's round will never open
    follower = GangRounds(tmp_path, 1, "one-a", "job")
    assert follower.open_round() is None
    assert GangRounds(tmp_path, 0, "zero-b", "job").announce() == 2  # the new index 0 goes on from the last round
    assert follower.open_round() == 2


def test_the_next_round_follows_every_round_index_0_joined(tmp_path):
    rounds = GangRounds(tmp_path, 0, "zero", "job")
    rounds.mark_joined(7)  # the round file was lost, the node's own record was not
    assert rounds.announce() == 8


def test_a_failed_round_counts_once_per_job_however_many_pods_saw_it(tmp_path):
    nodes = [GangRounds(tmp_path, node, f"t{node}", "job-a") for node in range(3)]
    assert [node.count_failure(4, 1) for node in nodes] == [1, 1, 1]
    assert nodes[2].count_failure(5, 137) == 2
    assert GangRounds(tmp_path, 0, "t", "job-b").failures() == 0  # another Job on the volume: its own budget
    assert (tmp_path / ".gang" / "failed" / "job-a" / "4").read_text() == "node 0 exit 1\n"


def test_without_a_job_identity_the_launcher_counts_alone(tmp_path):
    rounds = GangRounds(tmp_path, 0, "t", None)
    assert rounds.count_failure(1, 1) == 1 and rounds.count_failure(1, 1) == 1 and rounds.count_failure(2, 1) == 2
    assert not (tmp_path / ".gang" / "failed").exists()


def test_waiting_stops_when_the_gang_ended_in_a_round_this_node_was_in(tmp_path):
    alive(tmp_path, "zero")
    follower = GangRounds(tmp_path, 1, "one", "job")
    follower.mark_joined(3)
    GangRounds(tmp_path, 2, "two", "other-job").end(3, 80)
    assert follower.ended() is None  # another Job's end
    GangRounds(tmp_path, 2, "two", "job").end(2, 80)
    assert follower.ended() is None  # an earlier round's
    GangRounds(tmp_path, 2, "two", "job").end(3, 80)
    assert follower.ended() == 80
    assert follower.wait_for_round(timeout=30, say=print) is None  # at once, not after 30 s


def test_two_nodes_agree_on_every_round(tmp_path):
    alive(tmp_path, "zero")
    leader, follower = GangRounds(tmp_path, 0, "zero", "job"), GangRounds(tmp_path, 1, "one", "job")
    joined: list[int] = []
    turn = threading.Semaphore(0)

    def follow():
        for _ in range(5):
            generation = follower.wait_for_round(timeout=10, say=print)
            assert generation is not None
            follower.mark_joined(generation)
            joined.append(generation)
            turn.release()

    thread = threading.Thread(target=follow)
    thread.start()
    announced = []
    for _ in range(5):
        announced.append(leader.announce())
        assert turn.acquire(timeout=10)  # index 0 announces the next round only after this one
    thread.join(timeout=10)
    assert joined == announced == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("environ, expected", [
    ({}, (False, 3)),  # a launcher run by hand exits with the worker's code, as torchrun would
    ({"INDEXED_TRAINER_RESTART_IN_PLACE": "true", "INDEXED_TRAINER_MAX_RESTARTS": "5"}, (True, 5)),
    ({"INDEXED_TRAINER_RESTART_IN_PLACE": "false", "INDEXED_TRAINER_MAX_RESTARTS": "5"}, (False, 5)),
    ({"INDEXED_TRAINER_RESTART_IN_PLACE": "true", "INDEXED_TRAINER_MAX_RESTARTS": "x"}, (True, 3)),
])
def test_in_place_settings(environ, expected):
    assert in_place_settings(environ) == expected


@given(st.text())
def test_a_job_identity_is_one_safe_path_component(text):
    for environ in ({"INDEXED_TRAINER_JOB_UID": text}, {"SLURM_JOB_ID": text}):
        identity = job_identity(environ)
        assert identity is None or ("/" not in identity and identity.strip(".") and "\0" not in identity)


# -- the launcher's decision after a failed round ------------------------------------------------------------
def recovery(tmp_path, node: int, nodes: int, limit: int, leave_after: int = 0) -> InPlaceRecovery:
    """A node's recovery; by default its node never leaves (the budget's own tests)."""
    ledger = GangLedger(tmp_path, node, nodes)
    rounds = GangRounds(tmp_path, node, ledger.token, "job")
    said: list[str] = []
    environ = {LEAVE_AFTER_VARIABLE: str(leave_after), NODE_NAME_VARIABLE: f"gpu-node-{node}"}
    result = InPlaceRecovery(rounds, ledger, limit, said.append, said.append, environ=environ)
    result.said = said
    result.generation = 1
    return result


@pytest.mark.parametrize("node, nodes, code, signalled, limit, expected, counted", [
    (1, 2, 1, False, 3, None, 1),  # a crash: the next round, counted
    (1, 2, 137, False, 3, None, 1),  # a killed worker (out of memory): the same
    (1, 2, 1, False, 0, exit_codes.RESTARTS_EXHAUSTED, 1),  # past max_restarts: the Job fails
    (1, 2, exit_codes.PEER_LOST, False, 0, None, 0),  # a victim: index 0 decides, nothing counted here
    (1, 2, exit_codes.TERMINATED, False, 0, None, 0),  # a worker stopped by someone else's SIGTERM: uncounted
    (1, 2, exit_codes.TERMINATED, True, 3, exit_codes.TERMINATED, 0),  # this pod was stopped: it ends
    (1, 2, exit_codes.BAD_CONFIG, False, 3, exit_codes.BAD_CONFIG, 0),  # podFailurePolicy's FailJob: it ends
    (0, 1, exit_codes.PEER_LOST, False, 3, None, 1),  # every pod a victim (here the only one): counted once
    (0, 1, exit_codes.PEER_LOST, False, 0, exit_codes.RESTARTS_EXHAUSTED, 1),
])
def test_what_a_failed_round_leads_to(tmp_path, node, nodes, code, signalled, limit, expected, counted):
    decider = recovery(tmp_path, node, nodes, limit)
    assert decider.after(code, signalled) == expected
    assert decider.rounds.failures() == counted
    ends_the_gang = expected is not None and exit_codes.action(expected) == "fail"
    assert (decider.rounds.ended() == expected) if ends_the_gang else decider.rounds.ended() is None


def test_index_0_leaves_the_count_to_the_pod_that_explains_the_round(tmp_path):
    decider = recovery(tmp_path, 0, 2, 3)
    GangLedger(tmp_path, 1, 2).note(1)  # pod 1's worker crashed: its launcher counts the round
    GangRounds(tmp_path, 1, "t", "job").judge(1, 1, None)
    assert decider.after(exit_codes.PEER_LOST, False) is None
    assert decider.rounds.failures() == 1  # pod 1's count, not index 0's too
    GangRounds(tmp_path, 1, "t", "job").end(1, exit_codes.BAD_CONFIG)  # pod 1 ended the gang instead
    # index 0 ends with pod 1's code: were its 75 seen first, the Job would give index 0 a replacement pod
    assert decider.after(exit_codes.PEER_LOST, False) == exit_codes.BAD_CONFIG


@pytest.mark.parametrize("ended, expected", [
    (exit_codes.OK, exit_codes.OK),  # the gang completed while this pod waited
    (exit_codes.RESTARTS_EXHAUSTED, exit_codes.RESTARTS_EXHAUSTED),  # shared: a 75 seen first would be replaced
    (exit_codes.BAD_CONFIG, exit_codes.BAD_CONFIG),
    (exit_codes.PEER_LOST, exit_codes.PEER_LOST),  # Slurm: a node lost whole ended the step; the job requeues
])
def test_a_pod_waiting_for_a_round_ends_as_the_gang_ended(tmp_path, ended, expected):
    GangRounds(tmp_path, 0, "t0", "job").end(2, ended)
    waiting = recovery(tmp_path, 1, 2, 3)
    waiting.rounds.mark_joined(2)
    assert waiting._no_round(60) == expected


def test_index_0_waits_for_the_verdict_of_the_pod_that_failed_first_before_opening_a_round(tmp_path, monkeypatch):
    """Pod 1 notes its crash, then judges the round a moment later: its verdict spends the last restart. Index 0,
    a victim that read the note before the verdict, must not open a round nobody will join (it would wait out the
    join timeout: a Slurm job hung for 10 minutes so); and a pod lost between note and verdict delays it boundedly."""
    import threading

    from trainer_launcher import recovery as recovery_module

    decider = recovery(tmp_path, 0, 2, 0)
    GangLedger(tmp_path, 1, 2).note(1)
    threading.Timer(0.3, lambda: GangRounds(tmp_path, 1, "t", "job").judge(1, 1, None)).start()
    assert decider.after(exit_codes.PEER_LOST, False) == exit_codes.RESTARTS_EXHAUSTED  # the Job fails by either pod
    assert decider.rounds.failures() == 1 and decider.rounds.ended() is None

    monkeypatch.setattr(recovery_module, "VERDICT_WAIT_SECONDS", 0.3)
    (tmp_path / "lost").mkdir()
    lost = recovery(tmp_path / "lost", 0, 2, 3)
    GangLedger(tmp_path / "lost", 1, 2).note(1)  # and nothing more: pod 1 vanished after its note
    assert lost.after(exit_codes.PEER_LOST, False) is None and lost.rounds.failures() == 0


# -- the restart budget: faults after progress are not counted -------------------------------------------------
def publish(tmp_path, generation: int, checkpoint: str) -> None:
    """What the workers' rank 0 does when it publishes a checkpoint in round ``generation``."""
    note_progress(checkpoint, {PROGRESS_VARIABLE: str(tmp_path / ".gang" / "progress"),
                               "INDEXED_TRAINER_GANG_ROUND": str(generation)})


@pytest.mark.parametrize("published_in_round, expected", [
    ([], None),  # nothing published: a crash before the first checkpoint
    (["ckpt-e0001-s000000.pt"], "ckpt-e0001-s000000.pt"),
    (["ckpt-e0001-s000000.pt", "ckpt-e0002-s000000.pt"], "ckpt-e0002-s000000.pt"),
    (["ckpt-e0000-s000040.pt"], None),  # the checkpoint it resumed from, published again: no newer one
])
def test_a_round_made_progress_if_it_published_a_newer_checkpoint(tmp_path, published_in_round, expected):
    rounds = GangRounds(tmp_path, 0, "t", "job")
    publish(tmp_path, 1, "ckpt-e0000-s000040.pt")  # round 1's, which round 2 resumes from
    resumed_from = rounds.progress()
    for checkpoint in published_in_round:
        publish(tmp_path, 2, checkpoint)
    progressed = rounds.progressed(2, resumed_from)
    assert (progressed.checkpoint if progressed else None) == expected


def test_a_round_judged_after_progress_is_not_counted_and_its_verdict_stands_for_every_node(tmp_path):
    nodes = [GangRounds(tmp_path, node, f"t{node}", "job") for node in range(2)]
    publish(tmp_path, 1, "step-00000010.ckpt")
    first = nodes[1].judge(1, 137, nodes[1].progressed(1, None))  # node 1 judges first
    assert first == Verdict(counted=False, progress="step-00000010.ckpt", failures=0, node=1, code=137)
    assert nodes[0].judge(1, 75, None) == first  # judged once: the later judge reads the verdict
    assert nodes[0].judge(2, 1, None) == Verdict(counted=True, progress=None, failures=1, node=0, code=1)
    assert nodes[0].verdicts() == [False, True] and nodes[1].failures() == 1


@pytest.mark.parametrize("content", ["", "garbage", "-3 x", "1", "1 a b", "99999999999999999999 x", "\0\0\0"])
def test_a_progress_note_that_is_not_ours_reads_as_none(tmp_path, content):
    (tmp_path / ".gang").mkdir()
    (tmp_path / ".gang" / "progress").write_text(content)
    assert GangRounds(tmp_path, 0, "t", "job").progress() is None


def test_a_fifo_or_a_link_where_a_note_should_be_reads_as_none_at_once(tmp_path):
    (tmp_path / ".gang").mkdir()
    os.mkfifo(tmp_path / ".gang" / "progress")  # a blocking read would hang the launcher forever
    assert GangRounds(tmp_path, 0, "t", "job").progress() is None
    (tmp_path / ".gang" / "progress").unlink()
    (tmp_path / ".gang" / "progress").symlink_to("/dev/zero")
    assert GangRounds(tmp_path, 0, "t", "job").progress() is None


@given(st.text(max_size=60), st.integers(min_value=0, max_value=10**6))
def test_any_checkpoint_name_noted_reads_back_as_one_word(tmp_path_factory, name, generation):
    directory = tmp_path_factory.mktemp("progress")
    publish(directory, generation, name)
    progress = GangRounds(directory, 0, "t", "job").progress()
    word = "".join(name.split())
    assert (progress[:2] if progress else None) == ((generation, word) if word else None)
    assert progress is None or progress.time is not None


def test_a_crash_loop_fails_after_max_restarts_plus_one_rounds_and_faults_after_progress_never_do(tmp_path):
    limit = 2
    decider = recovery(tmp_path, 0, 1, limit)
    os.environ.pop(PROGRESS_VARIABLE, None)
    outcomes = []
    for generation in range(1, 7):  # six faults, each after a new checkpoint: none counted
        decider.generation, decider.resumed_from = generation, decider.rounds.progress()
        publish(tmp_path, generation, f"ckpt-e{generation:04d}-s000000.pt")
        outcomes.append(decider.after(137, False))
    assert outcomes == [None] * 6 and decider.rounds.failures() == 0
    outcomes = []
    for generation in range(7, 7 + limit + 1):  # then a deterministic crash before the next checkpoint
        decider.generation, decider.resumed_from = generation, decider.rounds.progress()
        outcomes.append(decider.after(1, False))
    assert outcomes == [None] * limit + [exit_codes.RESTARTS_EXHAUSTED]
    assert decider.rounds.ended() == exit_codes.RESTARTS_EXHAUSTED


# Each round: "crash" (failed before a newer checkpoint: counted), "fault" (failed after publishing one: not
# counted), "lost" (published one and ended unjudged: the whole gang preempted, its pods recreated).
@pytest.mark.parametrize(("rounds", "failures"), [
    (["crash"], 1),
    (["crash", "crash", "crash"], 3),  # a crash loop: every round counts
    (["crash", "crash", "fault", "crash"], 1),  # training between faults starts the count anew
    (["crash", "fault", "crash", "fault", "crash", "fault", "crash"], 1),
    (["fault"] * 6, 0),
    (["crash", "crash", "lost", "crash"], 1),  # a checkpoint published in a round nobody judged resets it too
    (["fault", "crash", "crash"], 2),
])
def test_the_budget_counts_rounds_failed_without_progress_one_after_another(tmp_path, rounds, failures):
    gang = GangRounds(tmp_path, 0, "t", "job")
    for generation, ending in enumerate(rounds, start=1):
        gang.announce()
        if ending in ("fault", "lost"):
            publish(tmp_path, generation, f"ckpt-e{generation:04d}-s000000.pt")
        if ending != "lost":
            gang.judge(generation, 137 if ending == "fault" else 1, gang.progressed(generation, None))
    assert gang.failures() == failures


def test_a_progress_note_from_a_round_not_yet_announced_resets_nothing(tmp_path):
    """The volume's notes are data: a note planted for a round far ahead of the gang's would otherwise reset the
    count for ever, and a crash loop would never end."""
    gang = GangRounds(tmp_path, 0, "t", "job")
    for generation in (1, 2):
        gang.announce()
        gang.judge(generation, 1, None)
    publish(tmp_path, 999, "ckpt-planted.pt")
    assert gang.failures() == 2


def test_the_live_metrics_say_how_the_jobs_failed_rounds_were_judged(tmp_path):
    from prometheus_client import generate_latest

    from trainer_contract import metrics
    from trainer_runtime.metrics import Live

    rounds = GangRounds(tmp_path, 0, "t", "job")
    publish(tmp_path, 1, "ckpt-e0001-s000000.pt")
    rounds.judge(1, 137, rounds.progressed(1, None))
    rounds.judge(2, 1, None)
    rounds.judge(3, 1, None)
    live = Live(None, print)
    environ = {"INDEXED_TRAINER_RESTART_IN_PLACE": "true", "INDEXED_TRAINER_MAX_RESTARTS": "5",
               "INDEXED_TRAINER_JOB_UID": "job"}
    live._failed_rounds(tmp_path, environ)
    line = metrics.summary(metrics.parse(generate_latest(live.registry).decode()))
    assert line == "failed rounds: 2 counted (2 in a row of 5 allowed), 1 after progress not counted"


# -- a node lost whole where nothing starts a successor (Slurm: the batch script requeues the job) ---------------
def test_on_slurm_index_0_ends_the_step_when_a_node_vanished_and_the_requeued_step_goes_on(tmp_path):
    from trainer_contract.gang_ledger import record_attempt

    ledger = GangLedger(tmp_path, 0, 2)
    rounds = GangRounds(tmp_path, 0, ledger.token, "812", step="0")
    decider = InPlaceRecovery(rounds, ledger, 3, print, print, replaced=False)
    decider.generation = 1
    record_attempt(tmp_path, {0: ledger.token, 1: "node-1-before"})
    (tmp_path / ".gang" / "1.alive").write_text("node-1-other 1\n")  # not the attempt's pod: it vanished
    assert decider.after(exit_codes.PEER_LOST, False) == exit_codes.PEER_LOST
    assert rounds.failures() == 0  # not judged here: the batch script judges the step (progress, then its count)
    follower = GangRounds(tmp_path, 1, "t1", "812", step="0")
    follower.mark_joined(1)
    assert follower.ended() == exit_codes.PEER_LOST  # the survivors stop waiting for a round
    requeued = GangRounds(tmp_path, 1, "t1b", "812", step="1")
    assert requeued.ended() is None  # the requeued job's step (SLURM_RESTART_COUNT 1) goes on


def test_on_slurm_a_node_waiting_for_a_vanished_index_0_gives_up_when_its_heartbeat_stops(tmp_path):
    alive(tmp_path, "zero")  # index 0's heartbeat, standing still
    follower = GangRounds(tmp_path, 1, "one", "812", step="0")
    follower.mark_joined(1)
    began = time.monotonic()
    assert follower.wait_for_round(timeout=60, say=print, leader_stale=0.5) is None
    assert time.monotonic() - began < 10
    decider = InPlaceRecovery(follower, GangLedger(tmp_path, 1, 2), 3, print, print, replaced=False)
    assert decider._no_round(60) == exit_codes.PEER_LOST


def test_the_gangs_notes_hold_as_much_at_1024_nodes_as_at_2_and_none_reads_back_cut(tmp_path):
    """Each node's token in a note of its own: at 1,024 nodes every token reads back (one note listing them all
    passed the 4,096 bytes a note may hold at about 120 nodes, and read back as none, silently); a note past its
    limit reads as absent, never as a shorter note."""
    from trainer_contract.gang_ledger import ATTEMPT, record_attempt
    from trainer_contract.volume_notes import NOTE_LIMIT, read_note

    tokens = {node: f"{node}-{4_000_000 + node}-{1_764_000_000_000_000_000 + node}" for node in range(1024)}
    record_attempt(tmp_path, tokens)
    ledger = GangLedger(tmp_path, 0, 1024)
    assert all(ledger._attempt_token(node) == token for node, token in tokens.items())
    sizes = {path.stat().st_size for path in (tmp_path / ".gang").glob(f"*.{ATTEMPT}")}
    assert len(list((tmp_path / ".gang").glob(f"*.{ATTEMPT}"))) == 1024 and max(sizes) < 64
    (tmp_path / "long").write_text("7" * (NOTE_LIMIT + 1))
    (tmp_path / "full").write_text("7" * NOTE_LIMIT)
    assert read_note(tmp_path / "long") is None and read_note(tmp_path / "full") == "7" * NOTE_LIMIT


@pytest.mark.parametrize("planted", ["fifo", "link to /dev/zero", "huge", "garbage"])
def test_the_gangs_files_on_the_volume_are_read_as_data(tmp_path, planted):
    """Whoever can write the volume (another Job on a shared claim, a compromised pod) may leave a FIFO, a link to
    /dev/zero, a huge file or garbage where each of the gang's notes goes: every reader returns at once, reads it as
    absent, and a planted failure entry spends nothing."""
    rounds = GangRounds(tmp_path, 1, "one", "job")
    ledger = GangLedger(tmp_path, 1, 2)
    gang = tmp_path / ".gang"
    (gang / "failed" / "job").mkdir(parents=True)
    notes = [gang / "round", gang / "1.joined", gang / "0.alive", gang / "ended", gang / "0.attempt",
             gang / "failed" / "job" / "3"]
    for note in notes:
        note.unlink(missing_ok=True)
        if planted == "fifo":
            os.mkfifo(note)
        elif planted == "link to /dev/zero":
            note.symlink_to("/dev/zero")
        elif planted == "huge":
            note.write_bytes(b"7 " * (4 << 20))
        else:
            note.write_bytes(b"\x00\xff node 0 exit 1 rm -rf /\n")
    began = time.monotonic()
    assert rounds.announced() is None and rounds.joined() == 0 and rounds.ended() is None
    assert rounds.failures() == 0 and rounds.verdicts() == []
    assert ledger._heartbeat(0) in (None, "") or len(ledger._heartbeat(0)) <= 4096
    assert ledger._attempt_token(0) is None
    assert time.monotonic() - began < 2


# -- a node that keeps failing leaves ------------------------------------------------------------------------------
def fail_round(decider: InPlaceRecovery, generation: int, code: int) -> int | None:
    decider.generation, decider.resumed_from = generation, decider.rounds.progress()
    return decider.after(code, False)


def test_a_node_that_fails_first_rounds_in_a_row_with_one_code_leaves_and_its_rounds_are_not_counted(tmp_path):
    decider = recovery(tmp_path, 1, 2, limit=1, leave_after=2)
    assert fail_round(decider, 1, 137) is None and decider.rounds.failures() == 1
    assert fail_round(decider, 2, 137) == exit_codes.NODE_LEFT  # 2 in a row: without leaving, past max_restarts 1
    assert decider.rounds.failures() == 0  # the departed node's rounds are excused
    assert (tmp_path / ".gang" / "failed" / "job" / "2").read_text() == "node 1 exit 137 leaves gpu-node-1\n"
    assert "the 2 rounds since the last checkpoint this node (gpu-node-1) failed first with that code: the node leaves" in decider.said[-1]
    assert "cordon node gpu-node-1" in decider.said[-1]
    assert exit_codes.action(exit_codes.NODE_LEFT) == "leave"


@pytest.mark.parametrize("rounds, left", [
    ([("own", 137), ("own", 1)], False),  # another code: another cause
    ([("own", 137), ("progress", 75), ("own", 137)], False),  # the gang trained between: the count starts anew
    ([("own", 137), ("other", 137), ("own", 137)], True),  # another broken node's turn between: still 2 of 2
    ([("own", 137), ("victim", 75), ("own", 137)], True),
    ([("other", 137), ("own", 137)], False),  # another node's verdict is not this node's failure
])
def test_only_the_node_that_failed_first_with_one_code_since_the_gang_last_trained_leaves(tmp_path, rounds, left):
    decider = recovery(tmp_path, 1, 3, limit=10, leave_after=2)
    other = GangRounds(tmp_path, 2, "t2", "job")
    outcomes = []
    for generation, (who, code) in enumerate(rounds, start=1):
        if who == "other":
            other.judge(generation, code, None)
        if who == "progress":  # this round published a newer checkpoint before it failed
            decider.generation, decider.resumed_from = generation, decider.rounds.progress()
            publish(tmp_path, generation, f"ckpt-{generation}.pt")
            outcomes.append(decider.after(code, False))
            continue
        outcomes.append(fail_round(decider, generation, code))
    assert (outcomes[-1] == exit_codes.NODE_LEFT) == left and exit_codes.NODE_LEFT not in outcomes[:-1]


def test_an_index_that_leaves_twice_without_progress_counts_every_round_so_a_crash_loop_still_ends(tmp_path):
    """A crash confined to one index: its node leaves once (excused), its new pod crashes the same way and leaves
    again; the second departure excuses nothing, and the Job fails after max_restarts + 1 rounds as before."""
    limit = 3
    first_pod = recovery(tmp_path, 1, 2, limit, leave_after=2)
    assert [fail_round(first_pod, 1, 3), fail_round(first_pod, 2, 3)] == [None, exit_codes.NODE_LEFT]
    second_pod = recovery(tmp_path, 1, 2, limit, leave_after=2)
    assert fail_round(second_pod, 3, 3) is None and second_pod.rounds.failures() == 1
    assert fail_round(second_pod, 4, 3) == exit_codes.RESTARTS_EXHAUSTED  # 4 rounds in a row > 3
    assert second_pod.rounds.failures() == 4


def test_after_progress_an_index_may_leave_again_without_charge(tmp_path):
    first_pod = recovery(tmp_path, 1, 2, 1, leave_after=2)
    assert [fail_round(first_pod, 1, 3), fail_round(first_pod, 2, 3)] == [None, exit_codes.NODE_LEFT]
    publish(tmp_path, 3, "ckpt-e0001-s000000.pt")  # the new pod's round trains and publishes a checkpoint
    second_pod = recovery(tmp_path, 1, 2, 1, leave_after=2)
    second_pod.generation, second_pod.resumed_from = 4, second_pod.rounds.progress()
    assert [fail_round(second_pod, 4, 3), fail_round(second_pod, 5, 3)] == [None, exit_codes.NODE_LEFT]
    assert second_pod.rounds.failures() == 0


def test_on_slurm_a_node_never_leaves(tmp_path):
    decider = recovery(tmp_path, 1, 2, limit=5, leave_after=2)
    decider.leave_after = InPlaceRecovery(decider.rounds, decider.ledger, 5, print, print, replaced=False).leave_after
    assert [fail_round(decider, generation, 3) for generation in (1, 2, 3)] == [None, None, None]


@given(st.text(max_size=300))
def test_any_verdict_line_parses_or_is_refused(line):
    parsed = gang_rounds._parsed_verdict(line)
    assert parsed is None or (isinstance(parsed[0], int) and isinstance(parsed[1], int))


@given(st.integers(0, 999_999), st.integers(-9999, 9999), st.none() | st.from_regex(r"[a-z0-9.-]{1,40}", fullmatch=True),
       st.none() | st.from_regex(r"[a-z0-9.-]{1,60}", fullmatch=True))
def test_a_judged_line_reads_back_as_written(node, code, checkpoint, host):
    line = f"node {node} exit {code}" + (f" after-progress {checkpoint}" if checkpoint else "") \
        + (f" leaves {host}" if host else "")
    assert gang_rounds._parsed_verdict(line) == (node, code, checkpoint, host)


def test_only_files_named_as_judge_names_them_are_verdicts(tmp_path):
    """A volume others can write: a superscript digit, a leading zero or a sign names no round (and breaks
    nothing); the round's own file is read once."""
    rounds = GangRounds(tmp_path, 0, "t", "job")
    rounds.judge(7, 1, None)
    directory = tmp_path / ".gang" / "failed" / "job"
    for name in ("\u00b2", "007", "+7", "7.tmp"):
        (directory / name).write_text("node 0 exit 1\n")
    assert rounds.failures() == 1 and rounds.verdicts() == [True]
