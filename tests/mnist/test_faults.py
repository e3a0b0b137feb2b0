"""FAULT_INJECT's grammar, filters and its one seam (trainer_contract/hooks.py); the faults fire in real runs in
test_fault_injection.py and tests/localjob/test_local_job_faults.py."""

import pytest

from tests.fault_injection.fault_injector import Fault, FaultHook, FaultInjector, count_start, parse
from trainer_contract import hooks
from trainer_contract.atomic import atomic_write
from trainer_contract.checkpoint_layout import Position
from trainer_contract.settings import ConfigError


def test_parses_entries_with_their_filters():
    assert parse("sigkill@batch=2.3,rank=1,attempt=0; sleep=1.5@checkpoint ;exit=75@download,rank=0") == [
        Fault("sigkill", "batch=2.3", 1, 0), Fault("sleep=1.5", "checkpoint"), Fault("exit=75", "download", 0)]
    assert parse("") == [] and parse(" ; ") == []


@pytest.mark.parametrize("text", ["boom@download", "sigkill", "sigkill@batch=2", "sigkill@download,node=1",
                                  "sleep=x@checkpoint", "sigkill@download,rank=-1"])
def test_a_malformed_entry_is_a_configuration_error_naming_it(text):
    with pytest.raises(ConfigError) as error:
        parse(f"sigkill@download; {text}")
    assert error.value.problems == [f"FAULT_INJECT: {text!r} is not ACTION@POINT[,rank=N][,attempt=N][,group=N] "
                                    "(see tests/fault_injection/fault_injector.py)"]


def test_a_group_filter_fires_in_that_replica_group_only(monkeypatch):
    faults = parse("sigkill@batch=1.2,group=1; sleep=1@batch")
    monkeypatch.setenv("REPLICA_GROUP", "1")
    assert [f.point for f in FaultInjector(faults, rank=0, attempt=0, log=print).faults] == ["batch=1.2", "batch"]
    monkeypatch.setenv("REPLICA_GROUP", "0")
    assert [f.point for f in FaultInjector(faults, rank=0, attempt=0, log=print).faults] == ["batch"]
    monkeypatch.delenv("REPLICA_GROUP")
    assert [f.point for f in FaultInjector(faults, rank=0, attempt=0, log=print).faults] == ["batch"]


def test_only_faults_for_this_rank_and_this_attempt_apply():
    faults = parse("sigkill@download,rank=1; sigkill@checkpoint,attempt=0; sigkill@batch=1.1,rank=0,attempt=1")
    assert [f.point for f in FaultInjector(faults, rank=0, attempt=0, log=print).faults] == ["checkpoint"]
    assert [f.point for f in FaultInjector(faults, rank=1, attempt=1, log=print).faults] == ["download"]
    assert [f.point for f in FaultInjector(faults, rank=0, attempt=1, log=print).faults] == ["batch=1.1"]


def test_attempts_count_this_ranks_earlier_starts(tmp_path):
    assert [count_start(tmp_path, 0) for _ in range(3)] == [0, 1, 2]
    assert count_start(tmp_path, 1) == 0


def test_a_sleep_fires_where_it_is_placed_and_logs_it():
    lines = []
    injector = FaultInjector(parse("sleep=0@checkpoint,rank=0"), rank=0, attempt=0, log=lines.append)
    injector.on("batch", epoch=1, batch=1)
    injector.on("before-rename")  # a file that is not a checkpoint's
    assert lines == []
    injector.on("checkpoint")
    injector.on("before-rename")
    injector.on("before-rename")  # the checkpoint's second file (a sharded manifest's rename): once per checkpoint
    assert lines == ["FAULT_INJECT: sleep=0 at checkpoint (attempt 0)"]


def test_through_the_seam_checkpoint_n_fires_inside_the_nth_write_only(tmp_path):
    """The worker's own points (trainer_contract/hooks.py) drive the injector: start, batches, checkpoint writes."""
    lines = []
    hooks.install(FaultHook("sleep=0@checkpoint=2,rank=0; exit=3@batch=9.9,rank=1"))
    try:
        hooks.point("start", rank=0, output_dir=tmp_path, under_launcher=False, log=lines.append)
        hooks.point("batch", epoch=9, batch=9)  # rank 1's fault: not this rank's
        for epoch in (1, 2, 3):
            hooks.point("checkpoint")
            atomic_write(tmp_path / "checkpoints" / Position(epoch, 0).filename(), b"state")  # the write's rename
    finally:
        hooks.install(None)
    assert lines == ["FAULT_INJECT: sleep=0 at checkpoint=2 (attempt 0)"]
    assert (tmp_path / ".faults" / "rank-0.starts").read_text() == "1"


def test_a_malformed_value_is_the_workers_configuration_error_at_start(tmp_path):
    hooks.install(FaultHook("boom@download"))
    try:
        with pytest.raises(ConfigError):
            hooks.point("start", rank=0, output_dir=tmp_path, under_launcher=False, log=print)
    finally:
        hooks.install(None)
