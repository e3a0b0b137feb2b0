"""Exact match and F1 by the SQuAD definition (the v1.1 evaluation script's): answers are compared after
lower-casing, removing punctuation and the articles a/an/the, and collapsing whitespace; F1 is the harmonic mean
of token precision and recall; each question scores its best over its reference answers; both are averaged over
the questions and given in percent. Torch-free."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize(prediction) == normalize(reference))


def f1(prediction: str, reference: str) -> float:
    predicted, expected = normalize(prediction).split(), normalize(reference).split()
    if not predicted or not expected:  # an empty answer matches only an empty answer
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def score(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """``{"exact_match", "f1"}`` in percent over every question of ``references`` (id -> its answers); a
    question without a prediction scores 0."""
    if not references:
        raise ValueError("no questions to score")
    totals = {"exact_match": 0.0, "f1": 0.0}
    for question, answers in references.items():
        prediction = predictions.get(question, "")
        totals["exact_match"] += _best(exact_match, prediction, answers)
        totals["f1"] += _best(f1, prediction, answers)
    return {name: 100.0 * total / len(references) for name, total in totals.items()}


def _best(metric, prediction: str, answers: Iterable[str]) -> float:
    return max((metric(prediction, answer) for answer in answers), default=0.0)
