"""Exact match and F1 by the SQuAD definition (worker/qa/squad_scores.py), table-driven: normalisation, partial
overlap, the best of several references, missing predictions."""

from __future__ import annotations

import pytest

from worker.qa import squad_scores


@pytest.mark.parametrize(("text", "normalized"), [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  an   apple, a PEAR ", "apple pear"),
    ("theatre", "theatre"),  # an article only as a whole word
    ("", ""),
])
def test_answers_are_normalized_as_the_squad_script_does(text, normalized):
    assert squad_scores.normalize(text) == normalized


@pytest.mark.parametrize(("prediction", "reference", "em", "f1"), [
    ("Denver Broncos", "Denver Broncos", 1.0, 1.0),
    ("the Denver Broncos.", "Denver Broncos", 1.0, 1.0),
    ("Denver", "Denver Broncos", 0.0, 2 * 1.0 * 0.5 / 1.5),  # precision 1, recall 1/2
    ("Broncos of Denver", "Denver Broncos", 0.0, 2 * (2 / 3) * 1.0 / (2 / 3 + 1.0)),
    ("Carolina Panthers", "Denver Broncos", 0.0, 0.0),
    ("", "Denver Broncos", 0.0, 0.0),
    ("the", "a", 1.0, 1.0),  # both normalise to nothing
])
def test_one_answer_scores_exact_match_and_token_f1(prediction, reference, em, f1):
    assert squad_scores.exact_match(prediction, reference) == em
    assert squad_scores.f1(prediction, reference) == pytest.approx(f1)


def test_each_question_takes_its_best_reference_and_a_missing_prediction_scores_zero():
    references = {"q1": ["Denver Broncos", "Broncos"], "q2": ["Santa Clara"], "q3": ["Levi's Stadium"]}
    predictions = {"q1": "Broncos", "q2": "Santa Clara, California"}
    scored = squad_scores.score(predictions, references)
    assert scored["exact_match"] == pytest.approx(100 / 3)
    assert scored["f1"] == pytest.approx(100 * (1.0 + 2 * (2 / 3) * 1.0 / (2 / 3 + 1.0) + 0.0) / 3)


def test_nothing_to_score_is_an_error():
    with pytest.raises(ValueError, match="no questions"):
        squad_scores.score({}, {})
