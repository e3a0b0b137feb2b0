"""Labelled texts for classification, as the Hub and users lay them out: in DATASET_DIR, each split's files are
named after it (``train.csv``, ``validation.jsonl``, ``plain_text/train-00000-of-00001.parquet``); parquet, CSV
(with a header) and JSON lines are read, the shards of a split in name order. Evaluation takes the validation
split, else the test split. Labels are class numbers from 0 or names (numbered in sorted order)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "json", ".json": "json"}
EVALUATION_SPLITS = ("validation", "test")


class DatasetError(ValueError):
    """DATASET_DIR's files are missing or not what the settings say; the message names the file and the fix."""


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


def split_files(dataset_dir: Path, split: str) -> list[Path]:
    pattern = re.compile(rf"^{split}([-_.][^/]*)?({'|'.join(re.escape(suffix) for suffix in FORMATS)})$")
    return sorted(path for path in dataset_dir.glob("**/*") if path.is_file() and pattern.match(path.name))


def read_table(paths: list[Path]) -> dict[str, list[Any]]:
    """The files' rows as columns (every file must have the same columns)."""
    import pyarrow
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet

    readers = {"parquet": pyarrow.parquet.read_table, "csv": pyarrow.csv.read_csv, "json": pyarrow.json.read_json}
    tables = []
    for path in paths:
        try:
            tables.append(readers[FORMATS[path.suffix]](path))
        except (pyarrow.ArrowInvalid, OSError) as error:
            raise DatasetError(f"{path}: cannot be read as {FORMATS[path.suffix]} ({error})") from None
    try:
        return pyarrow.concat_tables(tables).to_pydict()
    except pyarrow.ArrowInvalid as error:
        raise DatasetError(f"{paths[0].parent}: the files of one split have different columns ({error})") from None


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
    evaluation_split = next((split for split in EVALUATION_SPLITS if split_files(dataset_dir, split)), None)
    if evaluation_split is None:
        raise DatasetError(f"DATASET_DIR: {dataset_dir} has no validation or test split to evaluate on")
    train_texts, train_pairs, train_labels = _split(dataset_dir, "train", config, config.train_samples)
    eval_texts, eval_pairs, eval_labels = _split(dataset_dir, evaluation_split, config, config.eval_samples)
    train_numbers, eval_numbers, names = _numbered(train_labels, eval_labels, evaluation_split)
    return Texts(Split(train_texts, train_pairs, train_numbers), Split(eval_texts, eval_pairs, eval_numbers),
                 evaluation_split, names)


def tokenized(tokenizer: Any, split: Split, max_length: int) -> list[dict[str, Any]]:
    """One example per text: its token ids (and token types where the model has them), its label and index."""
    encoded = tokenizer(split.texts, split.pairs, truncation=True, max_length=max_length)
    keys = [key for key in ("input_ids", "token_type_ids") if key in encoded]
    return [{"index": index, **{key: encoded[key][index] for key in keys}, "labels": label}
            for index, label in enumerate(split.labels)]
