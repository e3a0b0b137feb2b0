"""trainer_contract/replica_groups.py: the variables of a replica group, read without torch, and a step's shares."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer_contract.replica_groups import (
    ReplicaGroups,
    bounds_of,
    from_environ,
    lighthouse_command,
    scaled,
    share_of,
    uploads_the_export,
    written_by,
)
from trainer_contract.settings import ConfigError

GOOD = {"REPLICA_GROUPS": "3", "REPLICA_GROUP": "2", "TORCHFT_LIGHTHOUSE": "http://lighthouse.ns.svc:29510"}


def test_without_replica_groups_the_job_is_one_gang():
    assert from_environ({}) is None
    assert from_environ({"REPLICA_GROUPS": " ", "REPLICA_GROUP": "x"}) is None


def test_a_group_reads_its_index_the_groups_and_the_lighthouse():
    groups = from_environ({**GOOD, "MIN_REPLICAS": "2"})
    assert groups == ReplicaGroups(2, 3, 2, "http://lighthouse.ns.svc:29510", max_replicas=3)
    assert groups.replica_id == "group2"  # torchft reads the index from the name's trailing digits
    assert from_environ(GOOD).min_replicas == 1


@pytest.mark.parametrize("changes, problem", [
    ({"REPLICA_GROUPS": "two"}, "REPLICA_GROUPS: 'two' must be a whole number of 1 or more"),
    ({"REPLICA_GROUPS": "0"}, "REPLICA_GROUPS: '0' must be 1 or more"),
    ({"REPLICA_GROUP": ""}, "REPLICA_GROUP: '' must be a whole number of 0 or more"),
    ({"REPLICA_GROUP": "-1"}, "REPLICA_GROUP: '-1' must be 0 or more"),
    ({"REPLICA_GROUP": "3"}, "REPLICA_GROUP: 3 must be below REPLICA_GROUPS (3)"),
    ({"MIN_REPLICAS": "4"}, "MIN_REPLICAS: 4 must be at most REPLICA_GROUPS (3)"),
    ({"MIN_REPLICAS": "0"}, "MIN_REPLICAS: '0' must be 1 or more"),
    ({"MAX_REPLICAS": "2"}, "MAX_REPLICAS: 2 must be at least REPLICA_GROUPS (3)"),
    ({"MAX_REPLICAS": "six"}, "MAX_REPLICAS: 'six' must be a whole number of 1 or more"),
    ({"MAX_REPLICAS": "6", "REPLICA_GROUP": "6"}, "REPLICA_GROUP: 6 must be below MAX_REPLICAS (6)"),
    ({"TORCHFT_LIGHTHOUSE": ""}, "TORCHFT_LIGHTHOUSE: '' must be the Lighthouse's http://HOST:PORT"),
    ({"TORCHFT_LIGHTHOUSE": "lighthouse:29510"}, "TORCHFT_LIGHTHOUSE: 'lighthouse:29510' must be"),
    ({"TORCHFT_LIGHTHOUSE": "http://lighthouse"}, "TORCHFT_LIGHTHOUSE: 'http://lighthouse' must be"),
    ({"TORCHFT_LIGHTHOUSE": "http://lighthouse:99999"}, "TORCHFT_LIGHTHOUSE: 'http://lighthouse:99999' must be"),
    ({"TORCHFT_LIGHTHOUSE": "http://u:p@lighthouse:1"}, "TORCHFT_LIGHTHOUSE: 'http://u:p@lighthouse:1' must be"),
])
def test_a_wrong_variable_is_named_with_what_it_must_be(changes, problem):
    with pytest.raises(ConfigError) as refused:
        from_environ({**GOOD, **changes})
    assert len(refused.value.problems) == 1 and refused.value.problems[0].startswith(problem), refused.value.problems


def test_a_group_of_an_index_the_job_grew_to_is_one_of_its_groups():
    groups = from_environ({**GOOD, "REPLICA_GROUP": "5", "MAX_REPLICAS": "6"})
    assert (groups.group, groups.groups, groups.max_replicas) == (5, 3, 6)


@given(st.integers(1, 1024), st.integers(0, 1024), st.integers(0, 1024))
def test_a_scale_sets_the_jobs_size_and_its_failure_floor_together_within_the_bounds(least, extra, count):
    most = least + extra
    if least <= count <= most:
        # the groups above the floor may fail, never all but one (the last one's success would fail the Job)
        assert scaled(count, least, most) == {"completions": count, "parallelism": count,
                                              "maxFailedIndexes": max(0, count - max(least, 2))}
    else:
        with pytest.raises(ValueError, match=rf"^{count} groups is outside the job's bounds: from "
                                             rf"fault_tolerance.min_replicas \({least}\) to "
                                             rf"fault_tolerance.max_replicas \({most}\)$"):
            scaled(count, least, most)


@pytest.mark.parametrize("environment, bounds", [
    ({}, None),
    ({"REPLICA_GROUPS": "3"}, (1, 3)),
    ({"REPLICA_GROUPS": "3", "MIN_REPLICAS": "2", "MAX_REPLICAS": "8"}, (2, 8)),
])
def test_the_bounds_of_a_rendered_environment(environment, bounds):
    assert bounds_of(environment) == bounds


@given(st.integers(0, 10_000), st.integers(1, 64))
def test_the_parts_of_a_step_take_every_example_once_in_order_and_evenly(count, parts):
    bounds = [share_of(count, parts, part) for part in range(parts)]
    assert bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(stop == start for (_, stop), (start, _) in pairwise(bounds))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@given(st.integers(0, 100), st.integers(1, 8), st.integers(-3, 12))
def test_a_part_outside_the_parts_is_refused(count, parts, part):
    if 0 <= part < parts:
        share_of(count, parts, part)
    else:
        with pytest.raises(ValueError):
            share_of(count, parts, part)


def test_the_lighthouse_is_torchfts_with_the_groups_floor_and_short_timeouts():
    command = lighthouse_command(2, 29510)
    assert command[0] == "torchft_lighthouse"
    assert "--min_replicas=2" in command and "--bind=[::]:29510" in command
    assert "--heartbeat_timeout_ms=1000" in command and "--join_timeout_ms=1000" in command


@pytest.mark.parametrize("environ, root", [
    ({}, "out"),
    ({"REPLICA_GROUP": "1"}, "out"),  # without REPLICA_GROUPS the job is one gang
    ({"REPLICA_GROUPS": "3", "REPLICA_GROUP": "1"}, "out/.groups/1"),
    ({"REPLICA_GROUPS": "3", "REPLICA_GROUP": "007"}, "out/.groups/7"),
    ({"REPLICA_GROUPS": "3", "REPLICA_GROUP": "../../etc"}, "out"),  # the worker refuses it (78), never a path
    ({"REPLICA_GROUPS": "3", "REPLICA_GROUP": "1" * 7}, "out"),
])
def test_each_replica_group_keeps_its_gang_notes_apart(environ, root):
    from pathlib import Path

    from trainer_contract.gang_ledger import notes_root

    assert notes_root(Path("out"), environ) == Path(root)


@pytest.mark.parametrize("host, good", [
    ("mnist-train-1.mnist-train", True), ("10.0.0.7", True), ("node-3", True), ("a.b.c.", True),
    ("", None), ("-bad", False), ("a..b", False), ("a b", False), ("fd00::1", False), ("x" * 64, False),
    ("a." * 127 + "b", False),
])
def test_the_host_other_groups_reach_is_a_name_or_an_ipv4_address(host, good):
    if good is None:
        assert from_environ({**GOOD, "REPLICA_GROUP_HOST": host}).host is None
    elif good:
        assert from_environ({**GOOD, "REPLICA_GROUP_HOST": host}).host == host
    else:
        with pytest.raises(ConfigError, match="REPLICA_GROUP_HOST: .* must be a host name"):
            from_environ({**GOOD, "REPLICA_GROUP_HOST": host})


@pytest.mark.parametrize(("environ", "summary", "uploads"), [
    ({}, {"accuracy": 0.9}, True),  # one gang: node 0 uploads
    ({}, None, True),
    ({"REPLICA_GROUPS": "3", "REPLICA_GROUP": "2"}, {"written_by_group": 2}, True),
    ({"REPLICA_GROUPS": "3", "REPLICA_GROUP": "1"}, {"written_by_group": 2}, False),
    ({"REPLICA_GROUPS": "3", "REPLICA_GROUP": "0"}, {"accuracy": 0.9}, False),  # a summary that names no writer
    ({"REPLICA_GROUPS": "3", "REPLICA_GROUP": "0"}, None, False),  # the writer has not finished
])
def test_only_the_group_that_wrote_the_model_uploads_the_export(environ, summary, uploads):
    assert uploads_the_export(summary, environ) is uploads


def test_the_summary_names_the_group_that_wrote_it_as_the_upload_reads_it():
    groups = ReplicaGroups(group=5, groups=8, min_replicas=1, lighthouse="http://h:29510")
    environ = {"REPLICA_GROUPS": "8", "REPLICA_GROUP": "5"}
    assert uploads_the_export(written_by(groups), environ)
    assert not uploads_the_export(written_by(groups), {**environ, "REPLICA_GROUP": "4"})
