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


def test_heartbeats_cost_the_volume_no_namespace_operation_after_the_first(tmp_path):
    """Three pods beat for 3.5 s (about ten beats in all): the gang's directory sees one create per pod and
    nothing else (no rename, no temporary file), while every beat is read back as it moves."""
    from bench.namespace_watch import NamespaceWatch

    (tmp_path / ".gang").mkdir()
    watch = NamespaceWatch(tmp_path / ".gang")
    pods = ledgers(tmp_path, nodes=3)
    try:
        for pod in pods:
            pod.start()
        seen = set()
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            seen.add(pods[0]._heartbeat(1))
            time.sleep(0.1)
    finally:
        for pod in pods:
            pod.stop()
        events = watch.read()
        watch.close()
    assert sorted(events) == [("create", f"{node}.alive") for node in range(3)]
    beats = sorted(int(text.split()[1]) for text in seen if text)
    assert beats[0] <= 1 and beats[-1] >= 3 and all(text.split()[0] == pods[1].token for text in seen if text)


def test_a_volume_that_cannot_rename_is_named_at_start_and_leaves_nothing(tmp_path, monkeypatch):
    """mountpoint-s3 refuses renames: the launcher's check at start says what the volume lacks, in one line, and
    leaves no file; a POSIX volume passes and keeps nothing of the check either."""
    import errno
    import os

    from trainer_contract.gang_ledger import volume_problem

    output = tmp_path / "runs" / "job"  # not created yet: the check runs where the volume is
    assert volume_problem(output, 3) is None and list(tmp_path.iterdir()) == []

    def refuse(source, target, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refuse)
    problem = volume_problem(output, 3)
    assert problem == (f"the shared volume at {tmp_path} cannot hold the gang's notes and checkpoints: PermissionError: "
                       "Operation not permitted (it needs POSIX renames and in-place writes: NFS, a parallel "
                       "filesystem, a block volume; not mountpoint-s3)")
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_where_the_heartbeat_goes_neither_blocks_it_nor_is_read_as_a_beat(tmp_path):
    import os

    ledger = GangLedger(tmp_path, 1, 2)
    (tmp_path / ".gang").mkdir()
    os.mkfifo(tmp_path / ".gang" / "1.alive")
    done = threading.Event()
    threading.Thread(target=lambda: (ledger._beat_in_place("t 1"), done.set()), daemon=True).start()
    assert done.wait(5)  # it returned: no reader, no wait
    assert ledger._heartbeat(1) is None


def test_a_volume_that_renames_but_cannot_rewrite_in_place_is_named_and_the_check_leaves_nothing(tmp_path,
                                                                                                 monkeypatch):
    import errno
    import os

    from trainer_contract.gang_ledger import volume_problem

    def refuse(descriptor, data, offset):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "pwrite", refuse)
    problem = volume_problem(tmp_path, 0)
    assert problem is not None and "OSError: Operation not supported" in problem
    assert list(tmp_path.iterdir()) == []  # the renamed probe went too
