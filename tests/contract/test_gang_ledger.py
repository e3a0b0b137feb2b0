"""The gang's ledger (trainer_contract/gang_ledger.py): index 0 counts an attempt in which every pod ended as a victim."""

import threading
import time

from trainer_contract.gang_ledger import GangLedger


def ledgers(tmp_path, nodes=3):
    return [GangLedger(tmp_path, node, nodes) for node in range(nodes)]


def test_every_pod_a_victim_means_nobody_failed_first(tmp_path):
    pods = ledgers(tmp_path)
    for pod in pods:
        pod.start()
        pod.note(75)
    assert pods[0].nobody_failed_first(wait=5) is True


def test_a_pod_that_ended_otherwise_explains_the_attempt_at_once(tmp_path):
    pods = ledgers(tmp_path)
    pods[0].note(75)
    pods[1].note(75)
    threading.Timer(0.3, pods[2].note, args=(3,)).start()  # the root cause's launcher notes its crash
    started = time.monotonic()
    assert pods[0].nobody_failed_first(wait=10) is False
    assert time.monotonic() - started < 5  # not the whole wait


def test_a_pod_that_left_no_note_is_the_jobs_to_count(tmp_path):
    pods = ledgers(tmp_path)
    pods[0].note(75)
    pods[1].note(75)  # pod 2 vanished whole (killed with its launcher): Kubernetes counts or excuses it
    assert pods[0].nobody_failed_first(wait=0.5) is False


def test_a_new_attempt_starts_without_its_own_old_note(tmp_path):
    first = ledgers(tmp_path, nodes=2)
    for pod in first:
        pod.note(75)
    second = ledgers(tmp_path, nodes=2)
    second[0].start()
    second[0].note(75)  # index 1's replacement has started (its old note removed) and is still running
    second[1].start()
    try:
        assert second[0].nobody_failed_first(wait=0.5) is False
    finally:
        second[1].stop()


def test_a_pod_whose_gang_never_assembled_writes_nothing(tmp_path):
    output = tmp_path / "out"  # the worker never ran: OUTPUT_DIR was never made
    GangLedger(output, 1, 2).note(76)
    assert not output.exists()


def test_a_pod_that_vanished_whole_is_known_by_its_silent_heartbeat_not_the_whole_wait(tmp_path):
    pods = ledgers(tmp_path, nodes=2)
    for pod in pods:
        pod.start()
    time.sleep(1.5)  # both count their heartbeats
    pods[0].note(75)
    pods[1].stopped.set()  # SIGKILLed with its launcher: no note, the counting stops
    started = time.monotonic()
    assert pods[0].nobody_failed_first(wait=30, stale=1.5) is False
    assert time.monotonic() - started < 5


def test_a_living_pod_is_waited_for_while_its_heartbeat_moves(tmp_path):
    pods = ledgers(tmp_path, nodes=2)
    for pod in pods:
        pod.start()
    pods[0].note(75)
    threading.Timer(3.0, pods[1].note, args=(75,)).start()  # a victim slow to note: its launcher still counts
    try:
        assert pods[0].nobody_failed_first(wait=30, stale=2.0) is True
    finally:
        pods[1].stop()


def test_a_pod_the_job_already_replaced_is_known_by_its_new_token(tmp_path):
    """Index 1 was SIGKILLed and its replacement counts its own heartbeat before index 0 reads the notes: the
    attempt's record names another launcher for node 1, so index 0 knows at once it will never note."""
    from trainer_contract.gang_ledger import record_attempt

    pods = ledgers(tmp_path, nodes=2)
    record_attempt(tmp_path, {0: pods[0].token, 1: pods[1].token})  # the gang as it assembled
    replacement = GangLedger(tmp_path, 1, 2)
    replacement.start()
    try:
        pods[0].note(75)
        started = time.monotonic()
        assert pods[0].nobody_failed_first(wait=30) is False
        assert time.monotonic() - started < 2
    finally:
        replacement.stop()
