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

from trainer_contract import data_mixture
from trainer_contract.settings import ConfigError

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


def mixed_source(settings: Any, train: Split) -> str:
    """The train split's source where TRAIN_WEIGHTS mixed it (a start line says the mix), else empty."""
    return train.source if getattr(settings, "train_weights", ()) else ""


def sources_said(facts: dict[str, Any]) -> str:
    """Where a start line's rows came from, from a tokenized run's facts: the mix where one was made, the evaluation
    split's source always."""
    mix = facts.get("training_mix")  # absent from a token cache written before mixes were said
    return f"({f'training: {mix}; ' if mix else ''}evaluation: {facts['evaluation_source']})"


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
    those named after their split (evaluation: validation, else test), else EVAL_FRACTION of the train rows; with
    TRAIN_WEIGHTS, the train rows are its datasets' mix (trainer_contract/data_mixture.py)."""
    if getattr(settings, "train_weights", ()):
        return _mixed_splits(settings)
    dataset_dir = settings.dataset_dir
    train_paths = (matched_files(dataset_dir, settings.train_files, "TRAIN_FILES") if settings.train_files
                   else split_files(dataset_dir, "train"))
    if not train_paths:
        raise DatasetError(f"DATASET_DIR: {dataset_dir} has no train split: expected train.parquet, train.csv, "
                           "train.jsonl or the Hub's layout (data/train-00000-of-00001.parquet), or TRAIN_FILES "
                           "naming its files; set initializer.dataset.storage_uri, or DATASET_DIR")
    train_name = "TRAIN_FILES' files" if settings.train_files else "the train split"
    train = Split("train", _described(train_name, train_paths, dataset_dir), read_table(train_paths))
    evaluation = _named_evaluation(settings, train_paths)
    if evaluation is not None:
        return train, evaluation
    _require_evaluation_fraction(settings)
    return held_out(train, settings.eval_fraction, settings.seed)


def _named_evaluation(settings: Any, train_paths: list[Path]) -> Split | None:
    """The evaluation split its files hold (EVAL_FILES', else the validation or test split's), none of them a
    training file; None where no file holds one."""
    evaluation = _evaluation_files(settings)
    if evaluation is None:
        return None
    eval_paths, name, described = evaluation
    both = sorted(set(eval_paths) & set(train_paths))
    if both:  # named by the variable that took it in: EVAL_FILES, else TRAIN_FILES' glob
        raise DatasetError(f"{'EVAL_FILES' if settings.eval_files else 'TRAIN_FILES'}: "
                           f"{both[0].relative_to(settings.dataset_dir)} is a training file and an evaluation file: "
                           "the evaluation would score what the model learnt; narrow TRAIN_FILES or EVAL_FILES")
    return Split(name, _described(described, eval_paths, settings.dataset_dir), read_table(eval_paths))


def _require_evaluation_fraction(settings: Any) -> None:
    if not settings.eval_fraction:
        raise DatasetError(f"DATASET_DIR: {settings.dataset_dir} has no validation or test split to evaluate on: add "
                           "one (validation.jsonl), name its files with EVAL_FILES, or hold out a fraction of the "
                           "train rows with EVAL_FRACTION")


def _mixed_splits(settings: Any) -> tuple[Split, Split]:
    """TRAIN_WEIGHTS' mix of TRAIN_FILES' datasets (one per glob) and the evaluation split: its own files', else
    EVAL_FRACTION held out of each dataset before the mix (an evaluated row is never trained on)."""
    problem = data_mixture.mixture_problem(settings)
    if problem:
        raise ConfigError([problem])
    dataset_dir, globs = settings.dataset_dir, settings.train_files
    groups = [matched_files(dataset_dir, (glob,), "TRAIN_FILES") for glob in globs]
    for glob, paths in zip(globs, groups, strict=True):
        other = next((path for other in groups if other is not paths for path in paths if path in other), None)
        if other is not None:
            raise DatasetError(f"TRAIN_FILES: {other.relative_to(dataset_dir)} is matched by {glob} and another "
                               "glob: with TRAIN_WEIGHTS each file belongs to one dataset; narrow the globs")
    datasets = [Split("train", glob, read_table(paths)) for glob, paths in zip(globs, groups, strict=True)]
    for dataset in datasets:
        if not _row_count(dataset):
            raise DatasetError(f"TRAIN_FILES: {dataset.source}'s files hold no rows: TRAIN_WEIGHTS cannot draw its "
                               "share from them")
    evaluation = _named_evaluation(settings, [path for paths in groups for path in paths])
    if evaluation is None:
        _require_evaluation_fraction(settings)
        parts = [held_out(dataset, settings.eval_fraction, settings.seed) for dataset in datasets]
        datasets = [kept for kept, _ in parts]
        evaluated = [part for _, part in parts]
        evaluation = Split("held-out", f"{settings.eval_fraction:g} of each of TRAIN_FILES' datasets held out "
                           "(EVAL_FRACTION; SEED chose the rows)", _concatenated([part.rows for part in evaluated]))
    return _mixed(datasets, settings.train_weights, settings.seed), evaluation


def _row_count(split: Split) -> int:
    return len(next(iter(split.rows.values()), []))


def _concatenated(tables: list[dict[str, list[Any]]]) -> dict[str, list[Any]]:
    columns = set(tables[0])
    for table in tables[1:]:
        if set(table) != columns:
            raise DatasetError(f"TRAIN_FILES: the datasets have different columns ({sorted(columns)}, "
                               f"{sorted(table)}); TRAIN_WEIGHTS mixes datasets of the same columns")
    return {column: [value for table in tables for value in table[column]] for column in tables[0]}


def _mixed(datasets: list[Split], weights: tuple[float, ...], seed: int) -> Split:
    """One train split of ``datasets``' rows, each dataset's share by its weight (trainer_contract/data_mixture.py),
    the rows ``seed`` chooses the same on every rank and every restart."""
    sizes = [_row_count(dataset) for dataset in datasets]
    counts = data_mixture.shares(sizes, weights)
    rng = random.Random(seed)
    chosen = []
    for dataset, size, share in zip(datasets, sizes, counts, strict=True):
        rows = data_mixture.drawn(size, share, rng)
        chosen.append({column: [values[row] for row in rows] for column, values in dataset.rows.items()})
    said = ", ".join(f"{dataset.source} x{weight:g} ({share:,} rows of {size:,})"
                     for dataset, weight, share, size in zip(datasets, weights, counts, sizes, strict=True))
    return Split("train", f"TRAIN_FILES' datasets mixed by TRAIN_WEIGHTS: {said}", _concatenated(chosen))
