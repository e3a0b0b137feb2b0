"""Every program's sampler: an epoch's order is one permutation of the examples seeded by SEED + epoch (as
DistributedSampler draws it), the same on every rank, dealt out round-robin (rank r takes every world_size-th index
from r) and taken in batches; a resumed run picks it up at any batch."""

from __future__ import annotations

import math

import torch


class RankBatches:
    """One rank's batches of example indices, shuffled per epoch from ``seed`` when ``shuffle``.

    ``pad``: the shorter shares are padded by repeating the order's first indices, so that every rank sees as many
    examples (DistributedSampler's rule, which a loss averaged per rank needs); without it every example is taken
    exactly once an epoch and a shorter share runs out one batch early (a rank's last batch may be short or empty:
    a loss summed and divided by the gang's count, ``examples_before``, needs no padding).

    Every rank has as many batches. Together the ranks' batches number ``b`` are the order's b-th block of
    ``batch_size x world_size`` indices (the ranks take turns within it): with that product fixed (GLOBAL_BATCH_SIZE),
    every step takes the same examples, and an epoch has as many steps, on any number of ranks. ``resume_at``
    (epoch, batches) skips that many batches of that epoch on the first pass after a resume."""

    def __init__(self, size: int, batch_size: int, rank: int, world_size: int, seed: int, shuffle: bool,
                 pad: bool = True):
        self.size, self.batch_size, self.rank, self.world_size = size, batch_size, rank, world_size
        self.seed, self.shuffle, self.pad = seed, shuffle, pad
        self.epoch = 0
        self.consumed = 0  # batches of the epoch taken so far, where a loader ahead of its steps cannot count them
        self.resume_at: tuple[int, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def per_rank(self) -> int:
        """The largest share: every share's length when padded."""
        return math.ceil(self.size / self.world_size)

    def __len__(self) -> int:
        return math.ceil(self.per_rank / self.batch_size)

    def share(self) -> list[int]:
        """This rank's indices for the epoch set, in order."""
        if self.shuffle:
            order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            order = list(range(self.size))
        if self.pad and order:  # repeated as often as it takes: fewer examples than ranks pad from the few there are
            missing = self.per_rank * self.world_size - self.size
            order += (order * math.ceil(missing / self.size))[:missing]
        return order[self.rank::self.world_size]

    def __iter__(self):
        mine = self.share()
        skip = self.resume_at[1] if self.resume_at is not None and self.resume_at[0] == self.epoch else 0
        self.resume_at = None
        for batch in range(skip, len(self)):
            yield mine[batch * self.batch_size:(batch + 1) * self.batch_size]

    def examples_before(self, batches: int) -> int:
        """Unpadded: the examples all ranks together take in an epoch's first ``batches`` batches, known to every rank
        without a collective (share r holds ceil((size - r) / world_size) of them)."""
        assert not self.pad, "a padded epoch takes world_size x batch_size examples a batch"
        taken = batches * self.batch_size
        whole, larger = divmod(self.size, self.world_size)  # ``larger`` shares hold one example more
        return larger * min(whole + 1, taken) + (self.world_size - larger) * min(whole, taken)
