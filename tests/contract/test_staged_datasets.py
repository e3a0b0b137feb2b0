"""initializer.datasets' contract (trainer_contract/datasets.py): the variable the render writes and the stager
reads, the place each list of datasets is staged, and the rule for a program's TRAIN_FILES."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer_contract import datasets
from trainer_contract.storage import StorageUriError

names = st.from_regex(datasets.NAME, fullmatch=True)
patterns = st.none() | st.lists(st.text(st.characters(blacklist_characters="\0"), min_size=1, max_size=8),
                                max_size=3)
entries = st.fixed_dictionaries({"storage_uri": st.text(min_size=1, max_size=40)},
                                optional={"max_unpacked_bytes": st.none() | st.integers(1, 2**40),
                                          "allow_patterns": patterns, "ignore_patterns": patterns})


@given(st.dictionaries(names, entries, min_size=1, max_size=datasets.MOST))
def test_what_the_render_writes_the_stager_reads_back_in_name_order(listed):
    read = datasets.parsed(datasets.rendered(listed))
    assert [dataset.name for dataset in read] == sorted(listed)
    for dataset in read:
        entry = listed[dataset.name]
        assert dataset.storage_uri == entry["storage_uri"]
        assert dataset.max_unpacked_bytes == entry.get("max_unpacked_bytes")
        for key in ("allow_patterns", "ignore_patterns"):
            assert getattr(dataset, key) == (None if entry.get(key) is None else tuple(entry[key]))


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=12)


@given(st.one_of(json_values.map(json.dumps), st.text()))
def test_any_other_text_is_refused_naming_the_variable_never_with_another_error(text):
    try:
        read = datasets.parsed(text)
    except StorageUriError as error:
        assert str(error).startswith(datasets.DATASETS_VARIABLE)
    else:  # what parses is what a render could have written
        assert datasets.parsed(datasets.rendered({d.name: {k: v for k, v in vars(d).items() if k != "name"}
                                                  for d in read})) == read


def test_the_schema_takes_the_names_and_the_number_the_stager_does():
    from generator.resources import schema as values_schema

    schema = values_schema()["properties"]["initializer"]["properties"]["datasets"]
    assert schema["propertyNames"]["pattern"] == f"^{datasets.NAME.pattern}$"
    assert schema["maxProperties"] == datasets.MOST
    assert set(schema["additionalProperties"]["properties"]) == set(datasets.FIELDS)


def test_each_list_of_names_and_uris_has_its_own_place_beside_the_single_datasets_places():
    one = datasets.mixed_path("/pvc", {"a": "s3://b/x", "b": "hf://datasets/o/n"})
    assert one == datasets.mixed_path("/pvc", {"b": "hf://datasets/o/n", "a": "s3://b/x"})  # the order is no matter
    others = {datasets.mixed_path("/pvc", listed) for listed in (
        {"a": "s3://b/y", "b": "hf://datasets/o/n"}, {"c": "s3://b/x", "b": "hf://datasets/o/n"}, {"a": "s3://b/x"})}
    assert one not in others and len(others) == 3
    assert one.startswith("/pvc/staged/datasets/mixed/")  # not under hf/, s3/, https/ or secret/


def table(train_files=(), eval_files=()):
    return SimpleNamespace(train_files=tuple(train_files), eval_files=tuple(eval_files))


@pytest.mark.parametrize(("config", "problem"), [
    (table(["chats/*.jsonl", "public/data/*.parquet"]), None),
    (table(["*/*.jsonl"]), None),  # a glob's first part may be a pattern: it matches names
    (table(["chats/*.jsonl"], ["public/test-*.parquet"]), None),
    (table(), "TRAIN_FILES: initializer.datasets stages each dataset into DATASET_DIR/<name> (chats, public)"),
    (table(["chat/*.jsonl"]), "TRAIN_FILES: 'chat/*.jsonl' starts with 'chat', which is no dataset"),
    (table(["chats/*.jsonl"], ["test/*.jsonl"]), "EVAL_FILES: 'test/*.jsonl' starts with 'test'"),
])
def test_a_programs_files_must_start_with_the_datasets_names(config, problem):
    found = datasets.files_problem(config, ["chats", "public"])
    assert (found is None) if problem is None else found.startswith(problem), found
