"""SQuAD-format questions from DATASET_DIR, checked as they are read: the SQuAD JSON layout (``train-v1.1.json``
and ``dev-v1.1.json`` as the SQuAD site ships them, or ``train.json`` and ``validation.json``), or the Hub
dataset's parquet layout (``plain_text/train-00000-of-00001.parquet``: columns id, title, context, question and
answers {text, answer_start}; pyarrow reads it). Every answer must stand in its context where its
``answer_start`` says; a file that breaks that is refused naming the file and the question, never trained on.
Torch-free."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Split = Literal["train", "validation"]
# the names each split's file goes by, first found wins
JSON_FILES: dict[Split, tuple[str, ...]] = {"train": ("train-v1.1.json", "train.json"),
                                            "validation": ("dev-v1.1.json", "validation.json", "dev.json")}


class DatasetError(ValueError):
    """SQuAD data that cannot be read as such: one line naming the file, the question and what is wrong."""


@dataclass(frozen=True)
class Question:
    id: str
    context: str
    question: str
    answers: tuple[str, ...]  # the reference answers (training uses the first)
    starts: tuple[int, ...]  # each answer's character offset in the context


def load_split(dataset_dir: Path, split: Split) -> list[Question]:
    """The questions of ``split`` under ``dataset_dir``."""
    for name in JSON_FILES[split]:
        path = dataset_dir / name
        if path.is_file():
            return read_json(path)
    parquet = parquet_files(dataset_dir, split)
    if parquet:
        return read_parquet(parquet)
    raise DatasetError(f"{dataset_dir}: no {split} split: expected one of {', '.join(JSON_FILES[split])} (the SQuAD "
                       f"JSON layout) or {split}-*.parquet (the Hub's parquet layout, e.g. plain_text/)")


def parquet_files(dataset_dir: Path, split: Split) -> list[Path]:
    """The parquet shards of ``split``, in order: ``<config>/<split>-NNNNN-of-NNNNN.parquet`` as the Hub lays
    them out, or at the top."""
    return sorted(path for path in dataset_dir.glob(f"**/{split}-*.parquet") if path.is_file())


def read_parquet(paths: list[Path]) -> list[Question]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError(f"{paths[0]}: reading parquet needs pyarrow: pip install 'indexed-trainer[hf]'") from None
    questions: list[Question] = []
    for path in paths:
        try:
            rows = pq.read_table(path, columns=["id", "context", "question", "answers"]).to_pylist()
        except Exception as error:  # pyarrow's errors share no base class worth naming  # noqa: BLE001
            raise DatasetError(f"{path}: not SQuAD parquet ({type(error).__name__}: {error}); expected the columns "
                               "id, context, question and answers {text, answer_start}") from None
        questions.extend(_question(path, row["context"], {
            "id": row["id"], "question": row["question"],
            "answers": [{"text": text, "answer_start": start}
                        for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"], strict=True)],
        }) for row in rows)
    if not questions:
        raise DatasetError(f"{paths[0]}: holds no questions")
    return questions


def read_json(path: Path) -> list[Question]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        articles = document["data"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DatasetError(f"{path}: not SQuAD JSON ({type(error).__name__}: {error}); expected "
                           '{"data": [{"paragraphs": [{"context": ..., "qas": [...]}]}]}') from None
    questions = [_question(path, paragraph["context"], qa) for article in articles
                 for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    if not questions:
        raise DatasetError(f"{path}: holds no questions")
    return questions


def _question(path: Path, context: str, qa: dict[str, Any]) -> Question:
    answers = tuple(answer["text"] for answer in qa.get("answers", []))
    starts = tuple(int(answer["answer_start"]) for answer in qa.get("answers", []))
    if not answers:
        raise DatasetError(f"{path}: question {qa.get('id')!r} has no answer (SQuAD v2's unanswerable questions are "
                           "not supported)")
    for text, start in zip(answers, starts, strict=True):
        if context[start:start + len(text)] != text:
            raise DatasetError(f"{path}: question {qa['id']!r}: answer_start {start} does not point at {text!r} in "
                               "its context")
    return Question(str(qa["id"]), context, qa["question"], answers, starts)
