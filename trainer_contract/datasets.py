"""initializer.datasets: several datasets, each staged from its own URI into DATASET_DIR/<name>, for a program that
names their files itself (a built-in workload's TRAIN_FILES globs, mixed by TRAIN_WEIGHTS: trainer_contract/
data_mixture.py). The render derives DATASET_DIR from every name and URI (a changed list is staged afresh, beside the
old one) and hands the stager the list in one variable; the stager checks it again, as it trusts no variable.

    initializer:
      datasets:
        chats: {storage_uri: s3://team-data/support-chats}
        public: {storage_uri: hf://datasets/org/name@v1, allow_patterns: ["data/*.parquet"]}
    config_map: {TRAIN_FILES: "chats/*.jsonl,public/data/*.parquet", TRAIN_WEIGHTS: "3,1"}
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer_contract.storage import STAGED_DIR, StorageUriError

# What the stager reads: a JSON object, name -> {"storage_uri", "max_unpacked_bytes", "allow_patterns",
# "ignore_patterns"} (the values' own keys; null or absent: not set).
DATASETS_VARIABLE = "INDEXED_TRAINER_DATASETS"
# A name is a directory under DATASET_DIR, and what TRAIN_FILES' globs start with (whole: fullmatch). The schema's
# propertyNames and maxProperties say the same (tests/contract/test_staged_datasets.py holds them to these).
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
MOST = 16
FIELDS = ("storage_uri", "max_unpacked_bytes", "allow_patterns", "ignore_patterns")
# A directory of its own beside staged/datasets/{hf,s3,https,secret}/ (storage.StorageUri.staged_path): no single
# dataset's place is inside a mix's, nor the other way round.
MIXED = "mixed"


@dataclass(frozen=True)
class StagedDataset:
    """One entry of initializer.datasets."""

    name: str
    storage_uri: str
    max_unpacked_bytes: int | None = None
    allow_patterns: tuple[str, ...] | None = None  # an hf:// repository's files, as snapshot_download takes them
    ignore_patterns: tuple[str, ...] | None = None


def mixed_path(shared: str, datasets: Mapping[str, str]) -> str:
    """DATASET_DIR for ``datasets`` (name -> URI) under ``shared``: one directory per list of names and URIs."""
    digest = hashlib.sha256(json.dumps(sorted(datasets.items())).encode()).hexdigest()[:16]
    return f"{shared}/{STAGED_DIR}/datasets/{MIXED}/{digest}"


def rendered(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """DATASETS_VARIABLE's text for the values' initializer.datasets (the fields set, sorted)."""
    return json.dumps({name: {key: entry[key] for key in FIELDS if entry.get(key) is not None}
                       for name, entry in sorted(entries.items())}, sort_keys=True, separators=(",", ":"))


def parsed(text: str) -> list[StagedDataset]:
    """DATASETS_VARIABLE's entries, in name order; StorageUriError naming what is wrong with any part of it."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not 1 <= len(value) <= MOST:
        raise StorageUriError(f"{DATASETS_VARIABLE}: write a JSON object of 1 to {MOST} datasets, name -> "
                              "{storage_uri, ...} (a render writes it from initializer.datasets)")
    return [_entry(name, value[name]) for name in sorted(value)]


def _entry(name: Any, entry: Any) -> StagedDataset:
    where = f"{DATASETS_VARIABLE}: dataset {str(name)[:80]!r}"
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise StorageUriError(f"{where}: a name is lower-case letters, digits, '-' and '_' (at most 63), starting "
                              "with a letter or digit: it is a directory under DATASET_DIR")
    if not isinstance(entry, dict) or set(entry) - set(FIELDS) or not isinstance(entry.get("storage_uri"), str) \
            or not entry["storage_uri"]:
        raise StorageUriError(f"{where}: write {{\"storage_uri\": ...}} with at most {', '.join(FIELDS[1:])}")
    limit = entry.get("max_unpacked_bytes")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise StorageUriError(f"{where}: max_unpacked_bytes is a positive number of bytes")
    return StagedDataset(name, entry["storage_uri"], limit, _patterns(entry.get("allow_patterns"), where),
                         _patterns(entry.get("ignore_patterns"), where))


def _patterns(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) and item and "\0" not in item for item in value):
        raise StorageUriError(f"{where}: allow_patterns and ignore_patterns are lists of glob patterns")
    return tuple(value)


def reads_several(config: Any) -> bool:
    """Whether a built-in program (its settings) names its files, and so can read several datasets."""
    return hasattr(config, "train_files")


def files_problem(config: Any, names: list[str]) -> str | None:
    """Why ``config`` (a program that names its files) cannot read initializer.datasets' ``names`` (a line naming
    the variable), or None: its TRAIN_FILES must name them, by globs under DATASET_DIR that start with a name."""
    if not config.train_files:
        return (f"TRAIN_FILES: initializer.datasets stages each dataset into DATASET_DIR/<name> ({', '.join(names)}): "
                f"name the training files by globs that start with a name (e.g. {names[0]}/*.jsonl); TRAIN_WEIGHTS "
                "mixes them")
    for variable, globs in (("TRAIN_FILES", config.train_files), ("EVAL_FILES", getattr(config, "eval_files", ()))):
        for pattern in globs:
            first = pattern.split("/", 1)[0]
            if not any(character in first for character in "*?[") and first not in names:
                return (f"{variable}: {pattern!r} starts with {first!r}, which is no dataset of initializer.datasets "
                        f"({', '.join(names)}): each dataset is staged into DATASET_DIR/<name>")
    return None
