"""Which of DATASET_DIR's rows train and which evaluate (trainer_runtime/pretrained/tables.py's ``splits``, read by
worker.finetune and worker.sft): files named after their split, files TRAIN_FILES and EVAL_FILES match, or
EVAL_FRACTION of the train rows held out; TRAIN_FILES' datasets mixed by TRAIN_WEIGHTS
(trainer_contract/data_mixture.py); and every way a layout is refused, one line naming the variable."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.generator.helpers import run_main
from trainer_contract import data_mixture
from trainer_contract.config_reading import ConfigError, load_config
from trainer_contract.program_settings import FinetuneConfig, SftConfig
from trainer_contract.settings import parse_file_patterns, parse_fraction, parse_weights
from trainer_runtime.pretrained.tables import DatasetError, Split, held_out, splits


def rows(path: Path, first: int, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": f"row {index}", "label": index % 2}) + "\n"
                            for index in range(first, first + count)))


def config(data: Path, config_class: type = FinetuneConfig, **variables: str):
    return load_config({"DATASET_DIR": str(data), **variables}, config_class=config_class)


def texts(split: Split) -> list[str]:
    return split.rows["text"]


@pytest.mark.parametrize("files, variables, train, evaluation, name, source", [
    ({"train.jsonl": (0, 4), "validation.jsonl": (10, 2), "test.jsonl": (20, 2)}, {}, range(4), range(10, 12),
     "validation", "the validation split (validation.jsonl)"),
    ({"train.jsonl": (0, 4), "test.jsonl": (20, 2)}, {}, range(4), range(20, 22), "test", "the test split (test.jsonl)"),
    # the Hub's layout: a split's shards, in name order
    ({"data/train-00001-of-00002.jsonl": (2, 2), "data/train-00000-of-00002.jsonl": (0, 2),
      "data/validation-00000-of-00001.jsonl": (10, 1)}, {}, range(4), range(10, 11), "validation",
     "the validation split (data/validation-00000-of-00001.jsonl)"),
    # globs name files whatever their names; the named splits beside them are not read
    ({"chat/a.jsonl": (0, 2), "chat/b.jsonl": (2, 2), "dev/x.jsonl": (10, 2), "validation.jsonl": (30, 1)},
     {"TRAIN_FILES": "chat/*.jsonl", "EVAL_FILES": "dev/*.jsonl"}, range(4), range(10, 12), "EVAL_FILES",
     "EVAL_FILES' files (dev/x.jsonl)"),
    ({"one/train.jsonl": (0, 2), "two/deep/more.jsonl": (2, 2), "validation.jsonl": (10, 1)},
     {"TRAIN_FILES": "one/*.jsonl, **/more.jsonl"}, range(4), range(10, 11), "validation",
     "the validation split (validation.jsonl)"),
])
def test_the_splits_come_from_the_files_their_names_or_the_globs_say(tmp_path, files, variables, train, evaluation,
                                                                      name, source):
    for path, (first, count) in files.items():
        rows(tmp_path / path, first, count)
    trained, evaluated = splits(config(tmp_path, **variables))
    assert texts(trained) == [f"row {index}" for index in train]
    assert texts(evaluated) == [f"row {index}" for index in evaluation]
    assert (evaluated.name, evaluated.source) == (name, source)


def test_without_an_evaluation_split_a_fraction_of_the_train_rows_is_held_out_the_same_on_every_call(tmp_path):
    rows(tmp_path / "train.jsonl", 0, 40)
    trained, evaluated = splits(config(tmp_path))  # EVAL_FRACTION's default, 0.05: 2 of 40 rows
    assert len(texts(evaluated)) == 2 and len(texts(trained)) == 38
    assert sorted(texts(trained) + texts(evaluated), key=lambda text: int(text.split()[1])) == \
        [f"row {index}" for index in range(40)]
    assert evaluated.name == "held-out"
    assert evaluated.source == "0.05 of the train split (train.jsonl) held out (EVAL_FRACTION; SEED chose the rows)"
    # every rank and every restart reads the same: the choice is SEED's, not the process's
    assert splits(config(tmp_path)) == (trained, evaluated)
    other = [texts(splits(config(tmp_path, SEED=str(seed), EVAL_FRACTION="0.25"))[1]) for seed in range(4)]
    assert len({tuple(held) for held in other}) > 1 and all(len(held) == 10 for held in other)


@given(count=st.integers(2, 300), fraction=st.floats(0.001, 0.999), seed=st.integers(0, 2**32))
def test_a_held_out_split_partitions_the_train_rows_in_their_order(count, fraction, seed):
    train = Split("train", "the train split", {"text": [f"row {index}" for index in range(count)],
                                                "label": list(range(count))})
    taken = math.ceil(fraction * count)
    if not 0 < taken < count:
        with pytest.raises(DatasetError, match=r"^EVAL_FRACTION: "):
            held_out(train, fraction, seed)
        return
    kept, evaluated = held_out(train, fraction, seed)
    assert len(evaluated.rows["label"]) == taken
    assert sorted(kept.rows["label"] + evaluated.rows["label"]) == list(range(count))
    for split in (kept, evaluated):  # in order, and each row whole (its columns together)
        assert split.rows["label"] == sorted(split.rows["label"])
        assert split.rows["text"] == [f"row {label}" for label in split.rows["label"]]


def make_link_out(data: Path) -> None:
    outside = data.parent / "outside.jsonl"
    rows(outside, 0, 2)
    os.symlink(outside, data / "linked.jsonl")


@pytest.mark.parametrize("files, variables, prepare, message", [
    ({"validation.jsonl": (0, 2)}, {}, None, r"^DATASET_DIR: .* has no train split: expected train.parquet, "
     r"train.csv, train.jsonl .* or TRAIN_FILES naming its files"),
    ({"train.jsonl": (0, 4)}, {"EVAL_FRACTION": "0"}, None, r"^DATASET_DIR: .* has no validation or test split to "
     r"evaluate on: add one \(validation.jsonl\), name its files with EVAL_FILES, or hold out .* EVAL_FRACTION$"),
    ({"train.jsonl": (0, 1)}, {}, None, r"^EVAL_FRACTION: 0.05 of the train split's 1 rows holds out 1: none would "
     r"be left to train"),
    ({"train.jsonl": (0, 4)}, {"TRAIN_FILES": "chat/*.jsonl"}, None, r"^TRAIN_FILES: chat/\*.jsonl matches no file "
     r"in .*; give globs relative to DATASET_DIR"),
    ({"train.jsonl": (0, 4), "notes.txt": (0, 1)}, {"EVAL_FILES": "*.txt"}, None, r"^EVAL_FILES: notes.txt is not "
     r"one of the formats read \(.parquet, .csv, .jsonl, .json\); narrow the globs$"),
    ({"train.jsonl": (0, 4), "validation.jsonl": (0, 1)}, {"EVAL_FILES": "*.jsonl"}, None,
     r"^EVAL_FILES: train.jsonl is a training file and an evaluation file: .* narrow TRAIN_FILES or EVAL_FILES$"),
    ({"train.jsonl": (0, 4)}, {"EVAL_FILES": "*.jsonl", "TRAIN_FILES": "train.jsonl"}, None,
     r"^EVAL_FILES: train.jsonl is a training file and an evaluation file"),
    # a glob that takes in the validation split, which evaluation takes by its name
    ({"train.jsonl": (0, 4), "validation.jsonl": (0, 1)}, {"TRAIN_FILES": "*.jsonl"}, None,
     r"^TRAIN_FILES: validation.jsonl is a training file and an evaluation file"),
    ({"train.jsonl": (0, 4)}, {"EVAL_FILES": "linked.jsonl"}, make_link_out,
     r"^EVAL_FILES: linked.jsonl links out of "),
])
def test_a_layout_that_cannot_train_or_evaluate_is_refused_in_one_line_naming_the_variable(
        tmp_path, files, variables, prepare, message):
    data = tmp_path / "data"
    data.mkdir()
    for path, (first, count) in files.items():
        rows(data / path, first, count)
    if prepare:
        prepare(data)
    with pytest.raises(DatasetError, match=message) as refused:
        splits(config(data, **variables))
    assert "\n" not in str(refused.value)


# each variable's refused values, and the words of the refusal
REFUSED = {
    "TRAIN_FILES": {"../other/*.jsonl": "leaves the data's folder",
                    "a/*.jsonl,chat/../../x.jsonl": "leaves the data's folder ('chat/../../x.jsonl')"},
    "EVAL_FILES": {"/etc/*.json": "leaves the data's folder"},
    "EVAL_FRACTION": {value: "must be a fraction" for value in ("1", "-0.1", "nan")},
    "TRAIN_WEIGHTS": {value: "must be comma-separated positive numbers, one per glob (3,1)"
                      for value in ("3,-1", "0", "3,,1", "inf", "a,b")},
}


@pytest.mark.parametrize("variable, value, problem", [
    (variable, value, problem) for variable, refused in REFUSED.items() for value, problem in refused.items()])
def test_globs_out_of_the_data_and_fractions_out_of_range_are_refused_naming_the_variable(variable, value, problem):
    for config_class in (FinetuneConfig, SftConfig):
        with pytest.raises(ConfigError) as refused:
            load_config({variable: value}, config_class=config_class)
        [line] = refused.value.problems
        assert line.startswith(f"{variable}: {value!r} {problem}"), line


def parsed_or_refused(parse, text: str, refusal: str):
    """``parse(text)``, or None where it refuses ``text`` with a ValueError saying ``refusal``."""
    try:
        return parse(text)
    except ValueError as refused:
        assert refusal in str(refused)
        return None


@given(st.text(max_size=60))
def test_file_patterns_parse_to_globs_inside_the_data_or_are_refused(text):
    patterns = parsed_or_refused(parse_file_patterns, text, "leaves the data's folder")
    if patterns is None:
        return
    for pattern in patterns:
        assert pattern and pattern == pattern.strip() and "," not in pattern
        assert not pattern.startswith(("/", "\\")) and ".." not in pattern.replace("\\", "/").split("/")
    assert parse_file_patterns(",".join(patterns)) == patterns


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_fraction_parses_to_zero_or_more_and_below_one(value):
    try:
        parsed = parse_fraction(repr(value))
    except ValueError:
        assert not 0 <= value < 1
        return
    assert 0 <= parsed < 1 and parsed == value


@pytest.mark.parametrize("sizes, weights, expected", [
    ((400, 1200), (3, 1), [1200, 400]),    # the smaller dataset taken three times, the larger one in part
    ((10, 10), (1, 1), [10, 10]),          # equal weights of equal datasets: every row once
    ((10, 10), (0.7, 0.3), [14, 6]),
    ((1, 1, 1), (1, 1, 1), [1, 1, 1]),
    ((5, 5), (1, 2), [3, 7]),              # 3.33 and 6.67: the larger remainder takes the last row
    ((3, 4), (1, 1), [4, 3]),              # 3.5 each: a tie goes to the first dataset
])
def test_each_dataset_takes_its_weights_share_of_an_epoch_of_all_their_rows(sizes, weights, expected):
    assert data_mixture.shares(sizes, weights) == expected


@given(st.lists(st.tuples(st.integers(1, 500), st.floats(0.001, 1000)), min_size=1, max_size=6))
def test_the_shares_add_up_to_the_rows_and_each_is_its_weights_rounded(datasets):
    sizes, weights = zip(*datasets, strict=True)
    counts = data_mixture.shares(sizes, weights)
    total, whole = sum(sizes), sum(weights)
    assert sum(counts) == total and min(counts) >= 0
    assert all(abs(count - total * weight / whole) < 1 + 1e-6 for count, weight in zip(counts, weights, strict=True))


@given(st.integers(1, 50), st.integers(0, 200), st.integers(0, 2**32))
def test_a_share_takes_every_row_as_often_as_it_fits_then_distinct_rows(size, share, seed):
    import random

    rows = data_mixture.drawn(size, share, random.Random(seed))
    assert len(rows) == share and rows == sorted(rows) and set(rows) <= set(range(size))
    times = {row: rows.count(row) for row in range(size)}
    assert set(times.values()) <= {share // size, share // size + 1}  # no row twice before every row once
    assert rows == data_mixture.drawn(size, share, random.Random(seed))  # the same on every rank and restart


def test_two_datasets_mix_by_weight_with_each_held_out_before_the_mix(tmp_path):
    """3:1 of a 40-row and a 120-row dataset: an epoch of the 152 rows left after 5 % of each is held out, 114 from
    the smaller one (every row twice or three times) and 38 from the larger (distinct rows, SEED's); no evaluated row
    is trained on; the same mix on every call (every rank, every restart); another SEED, other rows."""
    rows(tmp_path / "chat" / "a.jsonl", 0, 40)
    rows(tmp_path / "code" / "b.jsonl", 1000, 120)
    settings = {"TRAIN_FILES": "chat/*.jsonl,code/*.jsonl", "TRAIN_WEIGHTS": "3,1"}
    trained, evaluated = splits(config(tmp_path, SftConfig, **settings))
    chat = [text for text in texts(trained) if int(text.split()[1]) < 1000]
    code = [text for text in texts(trained) if int(text.split()[1]) >= 1000]
    assert (len(chat), len(code)) == (114, 38)  # 38 + 114 kept rows: shares of 3/4 and 1/4
    assert len(set(chat)) == 38 and {chat.count(text) for text in chat} <= {2, 3}
    assert len(set(code)) == 38
    assert len(texts(evaluated)) == 2 + 6 and not set(texts(evaluated)) & set(texts(trained))
    assert evaluated.source == ("0.05 of each of TRAIN_FILES' datasets held out (EVAL_FRACTION; SEED chose the rows)")
    assert trained.source == ("TRAIN_FILES' datasets mixed by TRAIN_WEIGHTS: chat/*.jsonl x3 (114 rows of 38), "
                              "code/*.jsonl x1 (38 rows of 114)")
    again, _ = splits(config(tmp_path, SftConfig, **settings))
    assert texts(again) == texts(trained)
    other, _ = splits(config(tmp_path, SftConfig, **settings, SEED="7"))
    assert sorted(set(texts(other))) != sorted(set(texts(trained)))


@pytest.mark.parametrize("files, variables, message", [
    ({"a.jsonl": (0, 4)}, {"TRAIN_FILES": "a.jsonl,*.jsonl", "TRAIN_WEIGHTS": "1,1"},
     r"^TRAIN_FILES: a.jsonl is matched by a.jsonl and another glob: with TRAIN_WEIGHTS each file belongs to one "
     r"dataset; narrow the globs$"),
    ({"a.jsonl": (0, 4), "b.csv": "text,label\n"}, {"TRAIN_FILES": "a.jsonl,b.csv", "TRAIN_WEIGHTS": "1,1"},
     r"^TRAIN_FILES: b.csv's files hold no rows: TRAIN_WEIGHTS cannot draw its share from them$"),
])
def test_datasets_that_cannot_mix_are_refused_naming_why(tmp_path, files, variables, message):
    for path, content in files.items():
        if isinstance(content, str):  # a table's header without rows
            (tmp_path / path).write_text(content)
        else:
            rows(tmp_path / path, *content)
    with pytest.raises(DatasetError, match=message):
        splits(config(tmp_path, **variables))


@pytest.mark.parametrize("variables, problem", [
    ({"TRAIN_WEIGHTS": "3,1"}, "TRAIN_WEIGHTS: weighs TRAIN_FILES' globs, one dataset each, and TRAIN_FILES is empty"),
    ({"TRAIN_WEIGHTS": "3", "TRAIN_FILES": "a/*,b/*"}, "TRAIN_WEIGHTS: 1 weight for 2 TRAIN_FILES globs: give one "
     "weight per glob, in TRAIN_FILES' order"),
    ({"TRAIN_WEIGHTS": "3,1,1", "TRAIN_FILES": "a/*,b/*"}, "TRAIN_WEIGHTS: 3 weights for 2 TRAIN_FILES globs"),
])
def test_weights_that_do_not_match_the_globs_are_a_configuration_error(tmp_path, variables, problem):
    settings = config(tmp_path, SftConfig, **variables)
    assert data_mixture.mixture_problem(settings).startswith(problem)
    with pytest.raises(ConfigError) as refused:
        splits(settings)
    assert refused.value.problems == [data_mixture.mixture_problem(settings)]


@given(st.text(max_size=40))
def test_weights_parse_to_positive_numbers_or_are_refused(text):
    weights = parsed_or_refused(parse_weights, text, "comma-separated positive numbers")
    if weights is None:
        return
    assert all(math.isfinite(weight) and weight > 0 for weight in weights)
    assert len(weights) == (len(text.split(",")) if text.strip() else 0)


@pytest.mark.parametrize("sets, said", [
    (["config_map.TRAIN_WEIGHTS=3,1"], "config_map.TRAIN_WEIGHTS: weighs TRAIN_FILES' globs, one dataset each, and "
     "TRAIN_FILES is empty: name each dataset's files by a glob (TRAIN_FILES=chat/*.jsonl,code/*.jsonl)"),
    (["config_map.TRAIN_FILES=chat/*.jsonl,code/*.jsonl", "config_map.TRAIN_WEIGHTS=3"],
     "config_map.TRAIN_WEIGHTS: 1 weight for 2 TRAIN_FILES globs: give one weight per glob, in TRAIN_FILES' order"),
    (["config_map.TRAIN_FILES=chat/*.jsonl,code/*.jsonl", "config_map.TRAIN_WEIGHTS=3,0"],
     "config_map.TRAIN_WEIGHTS: '3,0' must be comma-separated positive numbers, one per glob (3,1)"),
    (["config_map.TRAIN_FILES=chat/*.jsonl,code/*.jsonl", "config_map.TRAIN_WEIGHTS=3,1"], None),
])
def test_the_render_checks_the_weights_against_the_globs_as_the_program_will(sets, said):
    result = run_main(*(arg for item in ("entrypoint.module=worker.sft", *sets) for arg in ("--set", item)))
    if said is None:
        assert result.exit_code == 0, result.stderr
        return
    assert result.exit_code == 2 and result.stdout == "" and said in result.stderr, result.stderr
