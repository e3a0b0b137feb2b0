"""Questions to windows and labels, and logits back to answers (worker/qa/features.py), with a real fast
tokenizer built from the tests' WordPiece vocabulary; the Hub's parquet layout read as the JSON one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from testbed.qa_data import make_squad, squad_document
from worker.qa import features, squad

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import BertTokenizerFast

    from testbed.qa_data import ANSWERS, FILLERS, QUESTION_WORDS, SPECIAL

    vocabulary = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocabulary.write_text("\n".join(SPECIAL + QUESTION_WORDS + FILLERS + ANSWERS) + "\n")
    return BertTokenizerFast(str(vocabulary), do_lower_case=True)


def questions(count: int = 40) -> list[squad.Question]:
    document = squad_document(count, seed=7)
    return [squad._question(None, paragraph["context"], paragraph["qas"][0])
            for paragraph in document["data"][0]["paragraphs"]]


def test_the_labels_point_at_the_answer_tokens(tokenizer):
    items = questions()
    windows = features.featurize(tokenizer, items, max_length=64, stride=16)
    assert len(windows) == len(items)  # every context fits one window at 64 tokens
    for window in range(len(windows)):
        question = items[windows.question_of[window]]
        start, end = windows.starts[window], windows.ends[window]
        assert tokenizer.decode(windows.input_ids[window][start:end + 1]) == question.answers[0]


def test_a_long_context_gives_overlapping_windows_and_only_those_holding_the_answer_are_labelled(tokenizer):
    items = questions()
    windows = features.featurize(tokenizer, items, max_length=16, stride=4)
    assert len(windows) > len(items)
    assert all(len(ids) <= 16 for ids in windows.input_ids)
    labelled = 0
    for window in range(len(windows)):
        question = items[windows.question_of[window]]
        start, end = windows.starts[window], windows.ends[window]
        if (start, end) == (0, 0):
            continue  # the answer is not (wholly) in this window: [CLS]
        labelled += 1
        assert tokenizer.decode(windows.input_ids[window][start:end + 1]) == question.answers[0]
    assert labelled >= len(items)  # every answer is in at least one window


def test_logits_peaking_at_the_labels_give_back_every_answer_text(tokenizer):
    items = questions()
    windows = features.featurize(tokenizer, items, max_length=16, stride=4)
    starts, ends = [], []
    for window in range(len(windows)):
        length = len(windows.input_ids[window])
        start, end = np.full(length, -5.0), np.full(length, -5.0)
        if windows.starts[window]:
            start[windows.starts[window]], end[windows.ends[window]] = 10.0, 10.0
        starts.append(start)
        ends.append(end)
    predicted = features.answers(items, windows, starts, ends, max_answer_length=30)
    assert predicted == {item.id: item.answers[0] for item in items}


def test_an_answer_longer_than_max_answer_length_or_ending_before_its_start_is_never_predicted(tokenizer):
    (item,) = questions(1)
    windows = features.featurize(tokenizer, [item], max_length=64, stride=16)
    length = len(windows.input_ids[0])
    context = [position for position, span in enumerate(windows.offsets[0]) if span is not None]
    start, end = np.zeros(length), np.zeros(length)
    start[context[5]], end[context[1]] = 50.0, 50.0  # the best pair ends before it starts
    end[context[5]] = 1.0
    assert features.answers([item], windows, [start], [end], max_answer_length=1)[item.id] == \
        item.context[windows.offsets[0][context[5]][0]:windows.offsets[0][context[5]][1]]


def test_the_hubs_parquet_layout_reads_as_the_json_layout(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    json_dir = make_squad(tmp_path / "json", train=30, validation=10)
    for split, name in (("train", "train-v1.1.json"), ("validation", "dev-v1.1.json")):
        rows = [{"id": qa["id"], "title": "synthetic", "context": paragraph["context"], "question": qa["question"],
                 "answers": {"text": [answer["text"] for answer in qa["answers"]],
                             "answer_start": [answer["answer_start"] for answer in qa["answers"]]}}
                for paragraph in json.loads((json_dir / name).read_text())["data"][0]["paragraphs"]
                for qa in paragraph["qas"]]
        (tmp_path / "hub" / "plain_text").mkdir(parents=True, exist_ok=True)
        pq.write_table(pyarrow.Table.from_pylist(rows), tmp_path / "hub" / "plain_text" / f"{split}-00000-of-00001.parquet")
        assert squad.load_split(tmp_path / "hub", split) == squad.load_split(json_dir, split)


def test_parquet_without_the_squad_columns_is_refused_naming_the_file(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "plain_text" / "train-00000-of-00001.parquet"
    path.parent.mkdir()
    pq.write_table(pyarrow.Table.from_pylist([{"text": "no questions here"}]), path)
    with pytest.raises(squad.DatasetError, match=r"train-00000-of-00001.parquet: not SQuAD parquet"):
        squad.load_split(tmp_path, "train")
