"""Datasets mixed by weight, the rule in one place and torch-free: each of TRAIN_FILES' globs is one dataset, and
TRAIN_WEIGHTS gives each its share of an epoch. The render checks the settings (generator/validation.py); the
workloads' data (trainer_runtime/pretrained/tables.py) draws the rows.

An epoch holds as many rows as the datasets hold together, each dataset's share in proportion to its weight: a
dataset given less than its rows contributes rows chosen by SEED (each once), one given more contributes all its rows
as many whole times as fit and then rows chosen by SEED. This is datasets' ``interleave_datasets(probabilities=...)``
with the shares fixed rather than drawn per example, so an epoch's examples (and a resume's) are the same on every
rank and every start."""

from __future__ import annotations

import random
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

TRAIN_WEIGHTS_VARIABLE = "TRAIN_WEIGHTS"


def mixture_problem(config: Any) -> str | None:
    """Why ``config``'s TRAIN_WEIGHTS cannot weigh its TRAIN_FILES (a line naming the variable), or None."""
    weights = getattr(config, "train_weights", ())
    if not weights:
        return None
    globs = len(config.train_files)
    if not globs:
        return (f"{TRAIN_WEIGHTS_VARIABLE}: weighs TRAIN_FILES' globs, one dataset each, and TRAIN_FILES is empty: "
                "name each dataset's files by a glob (TRAIN_FILES=chat/*.jsonl,code/*.jsonl)")
    if len(weights) != globs:
        return (f"{TRAIN_WEIGHTS_VARIABLE}: {len(weights)} weight{'s' if len(weights) > 1 else ''} for {globs} "
                f"TRAIN_FILES glob{'s' if globs > 1 else ''}: give one weight per glob, in TRAIN_FILES' order")
    return None


def shares(sizes: Sequence[int], weights: Sequence[float]) -> list[int]:
    """Each dataset's rows in an epoch of ``sum(sizes)`` rows, in proportion to ``weights``; the largest remainders
    take the rows that rounding down leaves, so the shares add up exactly."""
    total, whole = sum(sizes), sum(Fraction(weight) for weight in weights)
    exact = [total * Fraction(weight) / whole for weight in weights]
    counts = [int(share) for share in exact]  # rounded down: shares are not negative
    by_remainder = sorted(range(len(exact)), key=lambda index: (counts[index] - exact[index], index))
    for index in by_remainder[:total - sum(counts)]:
        counts[index] += 1
    return counts


def drawn(size: int, share: int, rng: random.Random) -> list[int]:
    """The rows (indices) of a dataset of ``size`` rows that make up its ``share``: every row ``share // size``
    times, then ``share % size`` rows ``rng`` chooses, each once; in row order."""
    repeats, rest = divmod(share, size)
    return sorted([*range(size)] * repeats + rng.sample(range(size), rest))
