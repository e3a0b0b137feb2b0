"""CHECKPOINT_EVERY_SECONDS=auto: Young/Daly's interval from the measured cost of a save and the time between faults
(a prior by the nodes, then the faults the Job has seen), never shorter than a write; said in the log."""

from __future__ import annotations

import math
import time

import pytest

from trainer_contract.config_reading import load_config
from trainer_contract.program_settings import FinetuneConfig, QaConfig, SftConfig, TrainConfig
from trainer_contract.settings import AUTO, ConfigError
from trainer_runtime.checkpoints import interval
from trainer_runtime.checkpoints.clock import CheckpointClock

HOUR = 3600.0
NODE = interval.NODE_MTBF_HOURS * HOUR


@pytest.mark.parametrize(("cost", "write", "nodes", "faults", "elapsed", "expected"), [
    # 1,024 nodes, no fault yet: one every 5.6 h; an asynchronous save's 1 s wait -> about 200 s
    (1.0, 30.0, 1024, 0, 0.0, math.sqrt(2 * 1.0 * NODE / 1024)),
    # a synchronous 7B save (84 s) on 8 nodes
    (84.0, 84.0, 8, 0, 0.0, math.sqrt(2 * 84.0 * NODE / 8)),
    # faults seen: 3 in 10 h of a 1,024-node Job shorten the interval
    (1.0, 0.0, 1024, 3, 10 * HOUR, math.sqrt(2 * (NODE / 1024 + 10 * HOUR) / 4)),
    # the write takes longer than Young/Daly's interval: a save no sooner than the one in flight ends
    (0.01, 120.0, 1024, 0, 0.0, 120.0),
    # nearly free saves: no shorter than SHORTEST_SECONDS
    (0.0, 0.0, 1, 0, 0.0, interval.SHORTEST_SECONDS),
])
def test_the_interval_is_young_dalys_bounded_by_the_write(cost, write, nodes, faults, elapsed, expected):
    chosen = interval.choose(cost, write, nodes, faults, elapsed)
    assert chosen.seconds == pytest.approx(expected)


def test_faults_seen_shorten_the_interval_and_a_quiet_job_lengthens_it():
    quiet = interval.choose(1.0, 0.0, 64, 0, 100 * HOUR).seconds
    fresh = interval.choose(1.0, 0.0, 64).seconds
    flaky = interval.choose(1.0, 0.0, 64, 10, 100 * HOUR).seconds
    assert flaky < fresh < quiet


def test_the_clock_picks_its_interval_after_each_save_and_says_it_when_it_changes():
    said: list[str] = []
    clock = CheckpointClock(AUTO, votes=True, nodes=1024, log=said.append)
    assert clock.every_seconds == interval.FIRST_SECONDS  # until a save is measured
    clock.written(3.0)
    with clock.saving():
        time.sleep(0.05)
    expected = interval.choose(0.05, 3.0, 1024).seconds
    assert clock.every_seconds == pytest.approx(expected, rel=0.2)
    assert len(said) == 1 and said[0].startswith("checkpoint interval (CHECKPOINT_EVERY_SECONDS=auto): ")
    assert "1024 nodes, no fault seen yet" in said[0]
    with clock.saving():  # about the same cost: not said again
        time.sleep(0.05)
    assert len(said) == 1
    assert not clock.due()


def test_only_rank_0_chooses_and_a_number_stays_as_given():
    other = CheckpointClock(AUTO, votes=False, nodes=2)
    with other.saving():
        pass
    assert other.every_seconds == interval.FIRST_SECONDS and not other.due()
    fixed = CheckpointClock(30.0, votes=True)
    with fixed.saving():
        pass
    assert fixed.every_seconds == 30.0


@pytest.mark.parametrize("program", [TrainConfig, QaConfig, FinetuneConfig, SftConfig])
def test_every_program_reads_auto_and_refuses_a_word_naming_the_variable(program):
    assert load_config({"CHECKPOINT_EVERY_SECONDS": "auto"}, config_class=program).checkpoint_every_seconds == AUTO
    assert load_config({"CHECKPOINT_EVERY_SECONDS": "90"}, config_class=program).checkpoint_every_seconds == 90.0
    with pytest.raises(ConfigError, match="CHECKPOINT_EVERY_SECONDS"):
        load_config({"CHECKPOINT_EVERY_SECONDS": "often"}, config_class=program)
