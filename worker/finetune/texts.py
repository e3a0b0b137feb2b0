"""Labelled texts for classification, from DATASET_DIR's splits as the Hub and users lay them out, or as TRAIN_FILES
and EVAL_FILES name them (trainer_runtime.pretrained.tables). Evaluation takes the validation split, else the test
split, else EVAL_FRACTION of the train rows. Labels are class numbers from 0 or names (numbered in sorted order)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer_runtime.pretrained import tables
from trainer_runtime.pretrained.tables import DatasetError

__all__ = ["DatasetError", "Split", "Texts", "load", "tokenized"]


@dataclass(frozen=True)
class Split:
    texts: list[str]
    pairs: list[str] | None
    labels: list[int]


@dataclass(frozen=True)
class Texts:
    train: Split
    evaluation: Split
    evaluation_split: str
    evaluation_source: str  # where its rows came from (files, or the train rows held out), for the logs
    training_mix: str  # TRAIN_WEIGHTS' mix of the train rows, said in the logs; empty: no mix
    label_names: list[str] | None  # the labels' names where the data gave names, else None


def _column(table: dict[str, list[Any]], name: str, variable: str, source: str) -> list[Any]:
    if name not in table:
        raise DatasetError(f"{variable}: {source} has no column {name!r} (its columns: {', '.join(table)}); set "
                           f"{variable} to the one that holds it")
    return table[name]


def _split(split: tables.Split, config: Any, limit: int) -> tuple[list[str], list[str] | None, list[Any]]:
    table = split.first(limit).rows
    texts = [str(text) for text in _column(table, config.text_column, "TEXT_COLUMN", split.source)]
    pairs = ([str(text) for text in _column(table, config.text_pair_column, "TEXT_PAIR_COLUMN", split.source)]
             if config.text_pair_column else None)
    return texts, pairs, _column(table, config.label_column, "LABEL_COLUMN", split.source)


def _numbered(train: list[Any], evaluation: list[Any], evaluation_split: str) -> tuple[list[int], list[int],
                                                                                         list[str] | None]:
    if all(isinstance(label, int) and not isinstance(label, bool) for label in train + evaluation):
        unlabelled = sorted({label for label in train + evaluation if label < 0})
        if unlabelled:
            raise DatasetError(f"LABEL_COLUMN: label {unlabelled[0]} in the {evaluation_split} or train split: "
                               "class numbers start at 0 (a split without answers, such as GLUE's test, cannot "
                               "train or evaluate)")
        return train, evaluation, None
    names = sorted({str(label) for label in train})
    number = {name: index for index, name in enumerate(names)}
    unknown = sorted({str(label) for label in evaluation} - set(names))
    if unknown:
        raise DatasetError(f"LABEL_COLUMN: the {evaluation_split} split has labels the train split never shows: "
                           f"{', '.join(unknown[:5])}")
    return [number[str(label)] for label in train], [number[str(label)] for label in evaluation], names


def load(config: Any) -> Texts:
    train, evaluation = tables.splits(config)
    train_texts, train_pairs, train_labels = _split(train, config, config.train_samples)
    eval_texts, eval_pairs, eval_labels = _split(evaluation, config, config.eval_samples)
    train_numbers, eval_numbers, names = _numbered(train_labels, eval_labels, evaluation.name)
    return Texts(Split(train_texts, train_pairs, train_numbers), Split(eval_texts, eval_pairs, eval_numbers),
                 evaluation.name, evaluation.source, tables.mixed_source(config, train), names)


def tokenized(tokenizer: Any, split: Split, max_length: int) -> list[dict[str, Any]]:
    """One example per text: its token ids (and token types where the model has them), its label and index."""
    encoded = tokenizer(split.texts, split.pairs, truncation=True, max_length=max_length)
    keys = [key for key in ("input_ids", "token_type_ids") if key in encoded]
    return [{"index": index, **{key: encoded[key][index] for key in keys}, "labels": label}
            for index, label in enumerate(split.labels)]
