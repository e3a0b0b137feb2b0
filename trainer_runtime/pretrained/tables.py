"""A data set's splits as the Hub and users lay them out in DATASET_DIR: each split's files named after it
(``train.csv``, ``validation.jsonl``, ``plain_text/train-00000-of-00001.parquet``); parquet, CSV (with a header) and
JSON lines are read, the shards of a split in name order. The workloads read their columns from here (finetune's
texts and labels, sft's prompts, completions and conversations). TRAIN_FILES and EVAL_FILES name the files by globs
instead (as `datasets.load_dataset`'s data_files); where no file holds an evaluation split, EVAL_FRACTION of the
train rows are held out for it (as its train_test_split)."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "json", ".json": "json"}
EVALUATION_SPLITS = ("validation", "test")


class DatasetError(ValueError):
    """DATASET_DIR's files are missing or not what the settings say; the message names the file and the fix."""


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


def evaluation_split(dataset_dir: Path) -> str | None:
    """The split evaluation takes: validation, else test; None if there is neither."""
    return next((split for split in EVALUATION_SPLITS if split_files(dataset_dir, split)), None)


@dataclass(frozen=True)
class Split:
    """One split's rows as columns: ``name`` (train, validation, test, EVAL_FILES or held-out) and ``source``, where
    the rows came from as the logs and errors say it."""

    name: str
    source: str
    rows: dict[str, list[Any]]

    def first(self, limit: int) -> Split:
        """The first ``limit`` rows (0: all): TRAIN_SAMPLES and EVAL_SAMPLES."""
        return Split(self.name, self.source, {key: values[:limit] for key, values in self.rows.items()} if limit
                     else self.rows)


def _described(name: str, paths: list[Path], dataset_dir: Path) -> str:
    return f"{name} ({paths[0].relative_to(dataset_dir)}{f' and {len(paths) - 1} more' if len(paths) > 1 else ''})"


def matched_files(dataset_dir: Path, patterns: tuple[str, ...], variable: str) -> list[Path]:
    """The files ``patterns`` (globs relative to ``dataset_dir``) match, in name order: each a known format and
    inside ``dataset_dir`` (a link out of it is refused); DatasetError naming ``variable`` if none or another is."""
    root = dataset_dir.resolve()
    paths = sorted({path for pattern in patterns for path in dataset_dir.glob(pattern) if path.is_file()})
    if not paths:
        raise DatasetError(f"{variable}: {', '.join(patterns)} matches no file in {dataset_dir}; give globs relative "
                           "to DATASET_DIR (train/*.jsonl, **/*.parquet)")
    for path in paths:
        if path.suffix not in FORMATS:
            raise DatasetError(f"{variable}: {path.relative_to(dataset_dir)} is not one of the formats read "
                               f"({', '.join(FORMATS)}); narrow the globs")
        if not path.resolve().is_relative_to(root):
            raise DatasetError(f"{variable}: {path.relative_to(dataset_dir)} links out of {dataset_dir}")
    return paths


def held_out(train: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """``train`` less the rows held out for evaluation: ceil(fraction x rows) of them, chosen by ``seed`` (the same
    on every rank and every restart), each kept in its order."""
    count = len(next(iter(train.rows.values()), []))
    taken = math.ceil(fraction * count)
    if not 0 < taken < count:
        raise DatasetError(f"EVAL_FRACTION: {fraction} of the train split's {count} rows holds out {taken}: none "
                           "would be left to train or to evaluate on; add an evaluation split (validation.jsonl, "
                           "or EVAL_FILES) or change EVAL_FRACTION")
    chosen = set(random.Random(seed).sample(range(count), taken))
    kept = [index for index in range(count) if index not in chosen]
    evaluated = sorted(chosen)

    def rows(indices: list[int]) -> dict[str, list[Any]]:
        return {key: [values[index] for index in indices] for key, values in train.rows.items()}

    source = f"{fraction:g} of {train.source} held out (EVAL_FRACTION; SEED chose the rows)"
    return Split(train.name, train.source, rows(kept)), Split("held-out", source, rows(evaluated))


def _evaluation_files(settings: Any) -> tuple[list[Path], str, str] | None:
    """The evaluation's files, its split's name and how to name them: EVAL_FILES', else the validation split's, else
    the test split's; None where there are none."""
    if settings.eval_files:
        return matched_files(settings.dataset_dir, settings.eval_files, "EVAL_FILES"), "EVAL_FILES", "EVAL_FILES' files"
    named = evaluation_split(settings.dataset_dir)
    return None if named is None else (split_files(settings.dataset_dir, named), named, f"the {named} split")


def splits(settings: Any) -> tuple[Split, Split]:
    """The train and evaluation splits of ``settings.dataset_dir``: the files TRAIN_FILES and EVAL_FILES match, else
    those named after their split (evaluation: validation, else test), else EVAL_FRACTION of the train rows."""
    dataset_dir = settings.dataset_dir
    train_paths = (matched_files(dataset_dir, settings.train_files, "TRAIN_FILES") if settings.train_files
                   else split_files(dataset_dir, "train"))
    if not train_paths:
        raise DatasetError(f"DATASET_DIR: {dataset_dir} has no train split: expected train.parquet, train.csv, "
                           "train.jsonl or the Hub's layout (data/train-00000-of-00001.parquet), or TRAIN_FILES "
                           "naming its files; set initializer.dataset.storage_uri, or DATASET_DIR")
    train_name = "TRAIN_FILES' files" if settings.train_files else "the train split"
    train = Split("train", _described(train_name, train_paths, dataset_dir), read_table(train_paths))
    evaluation = _evaluation_files(settings)
    if evaluation is not None:
        eval_paths, name, described = evaluation
        both = sorted(set(eval_paths) & set(train_paths))
        if both:  # named by the variable that took it in: EVAL_FILES, else TRAIN_FILES' glob
            raise DatasetError(f"{'EVAL_FILES' if settings.eval_files else 'TRAIN_FILES'}: "
                               f"{both[0].relative_to(dataset_dir)} is a training file and an evaluation file: the "
                               "evaluation would score what the model learnt; narrow TRAIN_FILES or EVAL_FILES")
        return train, Split(name, _described(described, eval_paths, dataset_dir), read_table(eval_paths))
    if not settings.eval_fraction:
        raise DatasetError(f"DATASET_DIR: {dataset_dir} has no validation or test split to evaluate on: add one "
                           "(validation.jsonl), name its files with EVAL_FILES, or hold out a fraction of the train "
                           "rows with EVAL_FRACTION")
    return held_out(train, settings.eval_fraction, settings.seed)
