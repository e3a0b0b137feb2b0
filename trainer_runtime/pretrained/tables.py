"""A data set's splits as the Hub and users lay them out in DATASET_DIR: each split's files named after it
(``train.csv``, ``validation.jsonl``, ``plain_text/train-00000-of-00001.parquet``); parquet, CSV (with a header) and
JSON lines are read, the shards of a split in name order. The workloads read their columns from here (finetune's
texts and labels, sft's prompts, completions and conversations)."""

from __future__ import annotations

import re
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
