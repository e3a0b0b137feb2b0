"""SQuAD JSON read from DATASET_DIR (worker/qa/squad.py): the layouts, and refusals naming file and question."""

from __future__ import annotations

import json

import pytest

from worker.qa import squad

CONTEXT = "Super Bowl 50 was played at Levi's Stadium in Santa Clara."


def write(directory, name, qas, context=CONTEXT):
    directory.mkdir(parents=True, exist_ok=True)
    document = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    (directory / name).write_text(json.dumps(document))
    return directory / name


def qa(id_, question, *answers):
    return {"id": id_, "question": question,
            "answers": [{"text": text, "answer_start": CONTEXT.index(text)} for text in answers]}


@pytest.mark.parametrize(("name", "split"), [("train-v1.1.json", "train"), ("train.json", "train"),
                                             ("dev-v1.1.json", "validation"), ("validation.json", "validation")])
def test_each_layout_name_is_read(tmp_path, name, split):
    write(tmp_path, name, [qa("q1", "Where?", "Levi's Stadium", "Santa Clara")])
    (question,) = squad.load_split(tmp_path, split)
    assert question == squad.Question("q1", CONTEXT, "Where?", ("Levi's Stadium", "Santa Clara"), (28, 46))


def test_a_missing_split_names_the_files_it_looked_for(tmp_path):
    with pytest.raises(squad.DatasetError, match="no validation split: expected one of dev-v1.1.json, "
                                                  "validation.json, dev.json"):
        squad.load_split(tmp_path, "validation")


@pytest.mark.parametrize(("qas", "words"), [
    ([{"id": "q9", "question": "?", "answers": [{"text": "Levi's", "answer_start": 3}]}],
     "question 'q9': answer_start 3 does not point at \"Levi's\""),
    ([{"id": "q8", "question": "?", "answers": []}], "question 'q8' has no answer"),
    ([], "holds no questions"),
])
def test_bad_data_is_refused_naming_the_file_and_the_question(tmp_path, qas, words):
    path = write(tmp_path, "train.json", qas)
    with pytest.raises(squad.DatasetError) as raised:
        squad.load_split(tmp_path, "train")
    assert str(raised.value).startswith(str(path)) and words in str(raised.value)


def test_a_file_that_is_not_squad_json_says_what_was_expected(tmp_path):
    (tmp_path / "train.json").write_text("[1, 2]")
    with pytest.raises(squad.DatasetError, match="not SQuAD JSON"):
        squad.load_split(tmp_path, "train")
