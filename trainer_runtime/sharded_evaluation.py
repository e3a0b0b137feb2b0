"""How every built-in program evaluates on a gang: each rank its share of the held-out split, the same number of
forward passes on every rank, and the counts summed across the gang, so that the scores are those of the whole
split at any world size. The same number of forwards is what a sharded model needs (FSDP gathers its weights in
each one: a rank that skipped one would leave the others waiting); a rank whose share is shorter runs its last
ones on a stand-in it does not count."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist


def rank_batches(batch_size: int, rank: int, world_size: int, *columns: Sequence | torch.Tensor
                 ) -> Iterator[tuple[tuple, bool]]:
    """This rank's share (every ``world_size``-th item from ``rank``) of ``columns`` (lists or tensors of one
    length, sliced alike) in batches of ``batch_size``: (the batch's columns, whether it counts). As many batches
    on every rank, a stand-in (the split's first item) where a rank's share has run out."""
    total = len(columns[0])
    shares = [column[rank::world_size] for column in columns]
    for start in range(0, -(-total // world_size), batch_size):
        parts = tuple(share[start:start + batch_size] for share in shares)
        yield (parts, True) if len(parts[0]) else (tuple(column[:1] for column in columns), False)


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """``model`` in eval mode without gradients (no_grad: FSDP2 cannot run under inference_mode), then training."""
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train()


def gang_sum(values: Any, world_size: int) -> torch.Tensor:
    """``values`` (a tensor) summed over the gang, in place."""
    if world_size > 1:
        dist.all_reduce(values)
    return values
