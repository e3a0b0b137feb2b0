"""FAULT_INJECT's grammar and filters (pure logic; the faults themselves fire in test_fault_injection.py)."""

import pytest

from worker.config import ConfigError
from worker.faults import Fault, FaultInjector, count_start, parse


def test_parses_entries_with_their_filters():
    assert parse("sigkill@batch=2.3,rank=1,attempt=0; sleep=1.5@checkpoint ;exit=75@download,rank=0") == [
        Fault("sigkill", "batch=2.3", 1, 0), Fault("sleep=1.5", "checkpoint"), Fault("exit=75", "download", 0)]
    assert parse("") == [] and parse(" ; ") == []


@pytest.mark.parametrize("text", ["boom@download", "sigkill", "sigkill@batch=2", "sigkill@download,node=1",
                                  "sleep=x@checkpoint", "sigkill@download,rank=-1"])
def test_a_malformed_entry_is_a_configuration_error_naming_it(text):
    with pytest.raises(ConfigError) as error:
        parse(f"sigkill@download; {text}")
    assert error.value.problems == [f"FAULT_INJECT: {text!r} is not ACTION@POINT[,rank=N][,attempt=N] "
                                    "(see `python -c 'import worker.faults; help(worker.faults)'`)"]


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
    injector.at_batch(1, 1)
    assert lines == []
    assert injector.at_checkpoint() is not None
    injector.at_checkpoint()()
    assert lines == ["FAULT_INJECT: sleep=0 at checkpoint (attempt 0)"]
    assert FaultInjector([], rank=0, attempt=0, log=print).at_checkpoint() is None


def test_checkpoint_n_fires_inside_the_nth_write_only():
    lines = []
    injector = FaultInjector(parse("sleep=0@checkpoint=2"), rank=0, attempt=0, log=lines.append)
    assert injector.at_checkpoint() is None
    injector.at_checkpoint()()
    assert injector.at_checkpoint() is None
    assert lines == ["FAULT_INJECT: sleep=0 at checkpoint=2 (attempt 0)"]
