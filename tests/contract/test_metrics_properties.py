"""A status view parses whatever an endpoint answers (trainer_contract/metrics.py): any text gives samples or
nothing, and one line or None, never an exception; what the runtime serves reads back as it was set."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from trainer_contract import metrics

LINES = st.lists(st.one_of(
    st.text(max_size=40),
    st.builds(lambda name, value: f"{metrics.PREFIX}{name} {value}", st.sampled_from(sorted(metrics.METRICS)),
              st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=8))),
), max_size=20)


@settings(max_examples=300, deadline=None)
@given(lines=LINES, now=st.floats(min_value=0, max_value=4e9))
def test_any_scrape_parses_into_samples_and_at_most_one_line(lines, now):
    samples = metrics.parse("\n".join(lines))
    assert all(isinstance(value, float) for value in samples.values())
    line = metrics.summary(samples, now=now)
    assert line is None or ("\n" not in line and line)


@settings(max_examples=200, deadline=None)
@given(step=st.integers(0, 10**9), planned=st.integers(1, 10**9), loss=st.floats(0, 1e6))
def test_what_is_served_reads_back(step, planned, loss):
    samples = metrics.parse(f"indexed_trainer_step {float(step)!r}\nindexed_trainer_steps_planned {float(planned)!r}\n"
                            f"indexed_trainer_loss {loss!r}\n")
    assert samples["step"] == step and samples["steps_planned"] == planned and math.isclose(samples["loss"], loss)
    assert metrics.summary(samples).startswith(f"step {step}/{planned}, loss ")


def test_the_restart_budget_reads_as_one_part_of_the_line():
    scrape = ('indexed_trainer_failed_rounds{counted="true"} 2.0\nindexed_trainer_failed_rounds_in_a_row 1.0\n'
              'indexed_trainer_failed_rounds{counted="false"} 4.0\nindexed_trainer_max_restarts 3.0\n')
    assert metrics.summary(metrics.parse(scrape)) == ("failed rounds: 2 counted (1 in a row of 3 allowed), 4 after "
                                                      "progress not counted")


def test_the_replica_groups_quorum_reads_as_one_part_of_the_line():
    scrape = ('indexed_trainer_replica_groups_participating 2.0\n'
              'indexed_trainer_replica_group_steps{committed="true"} 118.0\n'
              'indexed_trainer_replica_group_steps{committed="false"} 2.0\n')
    assert metrics.summary(metrics.parse(scrape)) == ("2 replica groups stepping, this group's steps: 118 of 120 "
                                                      "committed")
