"""The tokenized data, made once and kept on the volume: rank 0 tokenizes the splits and writes them into
OUTPUT_DIR/token-cache/<key>/ while the other ranks wait for its word (trainer_runtime.prepared_once); every rank
then maps the files (numpy.memmap) and reads only the examples its batches take. A restart, and any later run with
the same key, reads the cache instead of tokenizing again.

The key is a digest of everything the examples depend on: the tokenizer's files, a path setting's content (a chat
template), the data's files, the program and its shaping settings and the data settings that choose the rows
(EVAL_FILES, EVAL_SAMPLES). The number of processes is not in it: a run resumed on another node count reuses it.

A cache is a directory written beside its final place and renamed into it (whole or absent); a file on the shared
volume is not trusted, so reading checks the manifest's shape, every file's size against it, the offsets' order and
every value against the range its column allows (a token id within the vocabulary): a damaged cache is said in one
line and made again, never loaded into the model. Numbers only: nothing in it can run code. The newest KEPT caches
stay; older ones are removed when a new one is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainer_contract.atomic import TEMP_PREFIX, fsync_directory
from trainer_runtime.distenv import DistEnv
from trainer_runtime.prepared_once import Preparation, prepared_once
from trainer_runtime.pretrained.run_identity import data_revision
from trainer_runtime.pretrained.tables import DatasetError

DIRECTORY = "token-cache"  # below OUTPUT_DIR; kept by RESUME=false (not a run's entry: keyed, it stays valid)
FORMAT = 1
MANIFEST = "manifest.json"
MANIFEST_LIMIT = 1 << 20  # bytes: a manifest says counts and a few lines, never more
KEPT = 2
TOKENS, OFFSETS = np.int32, np.int64
SPLITS = ("train", "evaluation")


@dataclass(frozen=True)
class Codec:
    """How a workload's example is kept: ``encode`` to named columns of integers, ``decode`` back; ``ranges``, given
    the vocabulary's size, the values each column may hold, checked on every read: ``(low, high)`` is 0..high, and
    ``low`` too where it is negative (the labels' IGNORE)."""

    encode: Callable[[Any], dict[str, list[int]]]
    decode: Callable[[dict[str, list[int]]], Any]
    ranges: Callable[[int], dict[str, tuple[int, int]]]


@dataclass(frozen=True)
class TokenizedSplits:
    """The examples of the two splits and what the workload says of them (JSON: sources, counts), made or read."""

    train: Sequence
    evaluation: Sequence
    facts: dict[str, Any] = field(default_factory=dict)


class CachedExamples(Sequence):
    """One split's examples from the mapped files: an example is decoded when its batch takes it."""

    def __init__(self, columns: dict[str, tuple[np.ndarray, np.ndarray]], decode: Callable[[dict], Any]):
        self.columns, self.decode = columns, decode
        self.length = len(next(iter(columns.values()))[1]) - 1

    def __len__(self) -> int:
        return self.length

    def values(self, column: str) -> np.ndarray:
        """Every example's values of ``column``, end to end (mapped: nothing decoded)."""
        return self.columns[column][0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))]
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        return self.decode({name: values[offsets[index]:offsets[index + 1]].tolist()
                            for name, (values, offsets) in self.columns.items()})


def key_of(record: dict[str, Any], config: Any) -> str:
    """The cache's key from a checkpoint's record of the run (trainer_runtime.pretrained.run_identity.record:
    the tokenizer's and the data's revisions, path settings' contents, shaping settings) and the data settings a
    record leaves out."""
    parts = {"format": FORMAT, "program": type(config).__name__,
             **{name: record.get(name) for name in ("tokenizer_revision", "content_revisions", "config")},
             # a workload whose checkpoints do not record the data (a resume on other data is its user's choice)
             # still tokenizes other data again
             "data_revision": record.get("data_revision") or data_revision(config.dataset_dir),
             "eval_files": list(getattr(config, "eval_files", ())), "eval_samples": getattr(config, "eval_samples", 0)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


class TokenCache:
    def __init__(self, root: Path, key: str, codec: Codec, vocabulary: int):
        self.root, self.key, self.codec, self.vocabulary = root, key, codec, vocabulary
        self.directory = root / key

    def read(self, log: Callable[[str], None]) -> TokenizedSplits | None:
        """The cache's splits, checked; None where there is none, or it fails a check (said)."""
        if not (self.directory / MANIFEST).is_file():
            return None
        try:
            return self._read()
        except (OSError, ValueError, KeyError, TypeError) as error:
            log(f"the tokenized data in {self.directory} is unusable ({error}): tokenizing again")
            return None

    def _read(self) -> TokenizedSplits:
        path = self.directory / MANIFEST
        if path.stat().st_size > MANIFEST_LIMIT:
            raise ValueError(f"{MANIFEST} is over {MANIFEST_LIMIT} bytes")
        manifest = json.loads(path.read_text())
        if manifest.get("format") != FORMAT or manifest.get("key") != self.key:
            raise ValueError(f"{MANIFEST} is of another format or key")
        ranges = self.codec.ranges(self.vocabulary)
        splits = {name: CachedExamples({column: self._column(name, column, int(manifest["splits"][name][column]),
                                                             int(manifest["splits"][name]["count"]), ranges[column])
                                        for column in ranges}, self.codec.decode)
                  for name in SPLITS}
        facts = manifest.get("facts")
        if not isinstance(facts, dict):
            raise ValueError(f"{MANIFEST} has no facts")
        return TokenizedSplits(splits["train"], splits["evaluation"], facts)

    def _column(self, split: str, column: str, length: int, count: int, allowed: tuple[int, int]
                ) -> tuple[np.ndarray, np.ndarray]:
        values = _mapped(self.directory / f"{split}-{column}.tokens", TOKENS, length)
        offsets = _mapped(self.directory / f"{split}-{column}.offsets", OFFSETS, count + 1)
        if offsets[0] != 0 or offsets[-1] != length or (count and bool((np.diff(offsets) < 0).any())):
            raise ValueError(f"{split}-{column}.offsets are out of order")
        low, high = allowed
        if length and (int(values.max()) > high or bool(((values < 0) & (values != min(low, 0))).any())):
            raise ValueError(f"{split}-{column} holds values outside {'' if low >= 0 else f'{low} and '}0..{high}")
        return values, offsets

    def write(self, splits: TokenizedSplits) -> None:
        """The splits into the cache's directory, whole or absent; then the older caches beyond KEPT go."""
        self.root.mkdir(parents=True, exist_ok=True)
        temporary = self.root / f"{TEMP_PREFIX}{self.key}-{os.getpid()}"
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir()
        try:
            self._write_into(temporary, splits)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        shutil.rmtree(self.directory, ignore_errors=True)  # an unusable one of the same key
        temporary.rename(self.directory)
        fsync_directory(self.root)
        self._prune()

    def _write_into(self, temporary: Path, splits: TokenizedSplits) -> None:
        manifest: dict[str, Any] = {"format": FORMAT, "key": self.key, "written_at": time.time(), "splits": {},
                                    "facts": splits.facts}
        for name, examples in zip(SPLITS, (splits.train, splits.evaluation), strict=True):
            manifest["splits"][name] = self._write_split(temporary, name, examples)
        (temporary / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        for path in temporary.iterdir():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())

    def _write_split(self, directory: Path, name: str, examples: Sequence) -> dict[str, int]:
        encoded = [self.codec.encode(example) for example in examples]
        said = {"count": len(encoded)}
        for column in self.codec.ranges(self.vocabulary):
            lengths = np.fromiter((len(item[column]) for item in encoded), dtype=OFFSETS, count=len(encoded))
            offsets = np.concatenate([np.zeros(1, dtype=OFFSETS), np.cumsum(lengths, dtype=OFFSETS)])
            values = np.fromiter((value for item in encoded for value in item[column]), dtype=TOKENS,
                                 count=int(offsets[-1]))
            values.tofile(directory / f"{name}-{column}.tokens")
            offsets.tofile(directory / f"{name}-{column}.offsets")
            said[column] = int(offsets[-1])
        return said

    def _prune(self) -> None:
        caches = sorted((path for path in self.root.iterdir() if (path / MANIFEST).is_file()),
                        key=lambda path: (path / MANIFEST).stat().st_mtime, reverse=True)
        for stale in [path for path in caches if path != self.directory][KEPT - 1:]:
            shutil.rmtree(stale, ignore_errors=True)
        for stale in self.root.glob(f"{TEMP_PREFIX}*"):  # an interrupted write's (one writer: rank 0)
            if stale.name != self.directory.name:
                shutil.rmtree(stale, ignore_errors=True)


def _mapped(path: Path, dtype: Any, count: int) -> np.ndarray:
    size = path.stat().st_size
    if size != count * np.dtype(dtype).itemsize:
        raise ValueError(f"{path.name} is {size} bytes, the manifest says {count * np.dtype(dtype).itemsize}")
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


@dataclass
class Tokenizing:
    """What the training skeleton hands a workload's load: ``tokenized(codec, vocabulary, make)`` gives the splits
    from the cache where one is there, else rank 0 runs ``make`` and writes the cache while the other ranks wait
    (at most TOKENIZE_TIMEOUT), and every rank reads it. ``store`` None: one process."""

    config: Any
    env: DistEnv
    store: Any
    key: str
    log: Callable[[str], None]

    def tokenized(self, codec: Codec, vocabulary: int, make: Callable[[], TokenizedSplits]) -> TokenizedSplits:
        cache = TokenCache(self.config.output_dir / DIRECTORY, self.key, codec, vocabulary)
        if self.store is None or self.env.world_size == 1:
            return self._here(cache, make)
        preparation = Preparation("tokenize the data", "tokenizing the data",
                                  f"indexed-trainer/token-cache/{self.env.restart_count}/{self.key}", "rank 0",
                                  self.config.tokenize_timeout, "TOKENIZE_TIMEOUT")
        here: list[TokenizedSplits] = []

        def prepare() -> str:
            here.append(self._here(cache, make))
            return self.key

        prepared_once(preparation, self.store, self.env.rank == 0, prepare, DatasetError, self.log)
        if here:
            return here[0]
        found = cache.read(lambda message: None)  # rank 0 said what was wrong with it
        if found is None:  # rank 0 could not write it, or OUTPUT_DIR is not the volume rank 0 wrote to
            self.log(f"the tokenized data is not in {cache.directory} for this process (rank 0 could not keep it "
                     "there, or OUTPUT_DIR is not on a volume every pod mounts): tokenizing here")
            return make()
        return found

    def _here(self, cache: TokenCache, make: Callable[[], TokenizedSplits]) -> TokenizedSplits:
        found = cache.read(self.log)
        if found is not None:
            self.log(f"the tokenized data is read from {cache.directory} ({len(found.train)} training and "
                     f"{len(found.evaluation)} evaluation examples; made once for this tokenizer, data and settings)")
            return found
        started = time.monotonic()
        made = make()
        try:
            cache.write(made)
        except OSError as error:  # a full or read-only volume: train on what was made, without a cache
            self.log(f"the tokenized data could not be kept in {cache.directory} ({error}); training on it without "
                     "a cache (a restart tokenizes again)")
            return made
        self.log(f"tokenized {len(made.train)} training and {len(made.evaluation)} evaluation examples in "
                 f"{time.monotonic() - started:.1f} s into {cache.directory} (a restart reads them there)")
        return cache.read(self.log) or made
