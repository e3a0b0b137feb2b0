"""Labelled texts for classification, from DATASET_DIR's splits as the Hub and users lay them out
(trainer_runtime.pretrained.tables). Evaluation takes the validation split, else the test split. Labels are class
numbers from 0 or names (numbered in sorted order)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_runtime.pretrained.tables import DatasetError, evaluation_split, read_table, split_files

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
    label_names: list[str] | None  # the labels' names where the data gave names, else None


def _column(table: dict[str, list[Any]], name: str, variable: str, source: str) -> list[Any]:
    if name not in table:
        raise DatasetError(f"{variable}: {source} has no column {name!r} (its columns: {', '.join(table)}); set "
                           f"{variable} to the one that holds it")
    return table[name]


def _split(dataset_dir: Path, split: str, config: Any, limit: int) -> tuple[list[str], list[str] | None, list[Any]]:
    paths = split_files(dataset_dir, split)
    table = read_table(paths)
    source = f"{split} split ({paths[0].relative_to(dataset_dir)}{' ...' if len(paths) > 1 else ''})"
    texts = [str(text) for text in _column(table, config.text_column, "TEXT_COLUMN", source)]
    pairs = ([str(text) for text in _column(table, config.text_pair_column, "TEXT_PAIR_COLUMN", source)]
             if config.text_pair_column else None)
    labels = _column(table, config.label_column, "LABEL_COLUMN", source)
    end = limit or len(texts)
    return texts[:end], pairs[:end] if pairs else None, labels[:end]


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
    dataset_dir = config.dataset_dir
    if not split_files(dataset_dir, "train"):
        raise DatasetError(f"DATASET_DIR: {dataset_dir} has no train split: expected train.parquet, train.csv, "
                           "train.jsonl or the Hub's layout (plain_text/train-00000-of-00001.parquet); set "
                           "initializer.dataset.storage_uri, or DATASET_DIR")
    evaluation = evaluation_split(dataset_dir)
    if evaluation is None:
        raise DatasetError(f"DATASET_DIR: {dataset_dir} has no validation or test split to evaluate on")
    train_texts, train_pairs, train_labels = _split(dataset_dir, "train", config, config.train_samples)
    eval_texts, eval_pairs, eval_labels = _split(dataset_dir, evaluation, config, config.eval_samples)
    train_numbers, eval_numbers, names = _numbered(train_labels, eval_labels, evaluation)
    return Texts(Split(train_texts, train_pairs, train_numbers), Split(eval_texts, eval_pairs, eval_numbers),
                 evaluation, names)


def tokenized(tokenizer: Any, split: Split, max_length: int) -> list[dict[str, Any]]:
    """One example per text: its token ids (and token types where the model has them), its label and index."""
    encoded = tokenizer(split.texts, split.pairs, truncation=True, max_length=max_length)
    keys = [key for key in ("input_ids", "token_type_ids") if key in encoded]
    return [{"index": index, **{key: encoded[key][index] for key in keys}, "labels": label}
            for index, label in enumerate(split.labels)]
