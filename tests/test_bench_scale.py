"""bench/scale.py's parts: virtual time for real code, the NFS volume's rules, and the counts it reports (the full
table is `python -m bench.scale`, docs/performance.md)."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from bench import scale
from trainer_contract.atomic import atomic_write
from trainer_contract.gang_ledger import GangLedger


def test_real_sleeps_run_in_virtual_time_one_thread_at_a_time():
    clock = scale.VirtualClock()
    woke: list[tuple[str, float]] = []
    saved = time.sleep
    time.sleep = clock.sleep
    try:
        def sleeper(name: str, seconds: float) -> None:
            for _ in range(3):
                time.sleep(seconds)
                woke.append((name, clock.monotonic()))

        began = clock.now
        for name, seconds in (("a", 100.0), ("b", 250.0)):
            clock.spawn(sleeper, name, seconds)
        started = time.perf_counter()
        clock.run(until=began + 10_000)
    finally:
        time.sleep = saved
    assert time.perf_counter() - started < 5  # 750 virtual seconds
    assert [(name, when - began) for name, when in woke] == [
        ("a", 100.0), ("a", 200.0), ("b", 250.0), ("a", 300.0), ("b", 500.0), ("b", 750.0)]


def test_a_name_another_client_created_stays_hidden_behind_a_cached_miss_until_the_directory_is_revalidated(tmp_path):
    """NFS: client 0 looks up a note in vain, client 1 creates it; client 0 keeps missing it until its directory
    attribute cache runs out (acdirmin), while a client that never missed it sees it at once, and data rewritten
    in place is seen at the next open (close-to-open)."""
    clock = scale.VirtualClock()
    volume = scale.NfsVolume(tmp_path, clock, acdirmin=30.0)
    note = tmp_path / "round"

    def read(client: int) -> str | None:
        volume.local.client = client
        try:
            descriptor = os.open(note, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return os.read(descriptor, 100).decode()
        finally:
            os.close(descriptor)

    volume.install()
    try:
        assert read(0) is None  # client 0 caches the miss
        clock.now += 5
        volume.local.client = 1
        atomic_write(note, b"1\n")  # client 1 creates it (a temporary, then a rename)
        assert read(1) == "1\n" and read(2) == "1\n"  # its writer, and a client that never missed it
        clock.now += 20
        assert read(0) is None  # 25 s since client 0 last looked at the directory
        clock.now += 6
        assert read(0) == "1\n"  # 31 s: revalidated
        volume.local.client = 1
        descriptor = os.open(note, os.O_WRONLY)
        os.pwrite(descriptor, b"2\n", 0)
        os.close(descriptor)
        assert read(0) == "2\n"  # rewritten in place: seen at the next open
    finally:
        volume.uninstall()
    assert volume.counts["create"] == 1 and volume.counts["rename"] == 1


@pytest.mark.slow
@pytest.mark.onecore
def test_the_steady_gang_costs_the_volume_no_namespace_operation_and_a_renamed_heartbeat_would(monkeypatch):
    """The simulation's count is the code's: with the heartbeat rewritten in place a steady gang of 8 makes no
    namespace operation; with a heartbeat written by rename (the way every other note is) it makes two a beat."""
    random.seed(1)
    model = scale.Model()
    row = scale.coordinate(8, model, steady_s=10.0)
    assert row["metadata_ops_per_node_s"] == 0
    assert row["detect_s"] == pytest.approx(2 * model.monitor_interval_s + model.store_rtt_s)
    assert row["recovery_s"] > model.restore_s(8) and row["recovery_opens_per_s"] > 0
    monkeypatch.setattr(GangLedger, "_beat_in_place", lambda ledger, words: atomic_write(
        ledger.directory / f"{ledger.node}.alive", f"{words}\n".encode()))
    renamed = scale.coordinate(8, model, steady_s=10.0)
    assert renamed["metadata_ops_per_node_s"] == pytest.approx(2.0, rel=0.1)


def test_the_budget_in_force_keeps_jobs_that_a_broken_node_ends_under_the_rules_it_replaced():
    model = scale.Model()
    rate = scale.LLAMA3_FAULTS_PER_NODE_HOUR * 4
    outcomes = {rule: scale.budget(256, rate, model, rule, trials=6, seed=11, recovery_s=60.0) for rule in scale.RULES}
    assert outcomes["no departure"]["p_fail_14d"] > outcomes["in force"]["p_fail_14d"]
    assert outcomes["whole life"]["p_fail_14d"] >= outcomes["no departure"]["p_fail_14d"]
    assert 0 < outcomes["in force"]["goodput"] <= 1


def test_the_table_names_what_misses_its_target():
    row = {"nodes": 1024, "goodput": 0.95, "p_fail_14d": 0.02, "metadata_ops_per_node_s": 0.0, "detect_s": 0.2}
    assert scale.misses(row) == ["p_fail_14d 0.020 > 0.01"]
    assert threading.active_count() >= 1
