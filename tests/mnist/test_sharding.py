"""Each epoch's shards: disjoint, complete, reshuffled, and the same step count on every rank."""

import pytest
import torch

from worker.mnist.data import images_before_step, shard_indices, steps_per_epoch


@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("count", [1, 7, 100, 1001])
def test_shards_are_disjoint_and_cover_the_epoch(world, count):
    shards = [shard_indices(count, world, rank, seed=3, epoch=2) for rank in range(world)]
    union = torch.cat(shards)
    assert len(union) == count and len(set(union.tolist())) == count
    assert max(len(s) for s in shards) - min(len(s) for s in shards) <= 1
    steps = steps_per_epoch(count, world, batch_size=8)
    assert all(len(s) <= steps * 8 for s in shards)
    assert any(len(s) > (steps - 1) * 8 for s in shards)  # no step runs empty on every rank


def test_each_epoch_is_reshuffled_and_reproducible():
    first = shard_indices(1000, 2, 0, seed=0, epoch=0)
    assert not torch.equal(first, shard_indices(1000, 2, 0, seed=0, epoch=1))
    assert torch.equal(first, shard_indices(1000, 2, 0, seed=0, epoch=0))


def test_ranks_draw_from_one_shared_permutation():
    permutation = torch.cat([shard_indices(10, 1, 0, seed=5, epoch=1)])
    assert torch.equal(shard_indices(10, 2, 1, seed=5, epoch=1), permutation[1::2])


@pytest.mark.parametrize("count, world, batch", [(1, 1, 1), (7, 3, 2), (1024, 2, 32), (1025, 8, 5), (100, 3, 64)])
def test_images_before_step_counts_what_the_shards_hand_out(count, world, batch):
    steps = steps_per_epoch(count, world, batch)
    for step in range(steps + 2):
        handed_out = sum(len(shard_indices(count, world, rank, 0, 0)[:step * batch]) for rank in range(world))
        assert images_before_step(count, world, batch, step) == handed_out
    assert images_before_step(count, world, batch, steps) == count  # every image once per epoch
