"""Every program's sampler (trainer_runtime.sampler.RankBatches): each epoch's shares disjoint, complete and
reshuffled, drawn from one permutation shared by the ranks, the same batch count on every rank, and the examples a
step takes known to every rank without a collective; padded (the transformer workloads) or not (MNIST)."""

import pytest
import torch

from trainer_runtime.sampler import RankBatches


def shares(count, world, batch=8, seed=3, epoch=2, pad=False):
    samplers = [RankBatches(count, batch, rank, world, seed, True, pad=pad) for rank in range(world)]
    for sampler in samplers:
        sampler.set_epoch(epoch)
    return samplers, [sampler.share() for sampler in samplers]


@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("count", [1, 7, 100, 1001])
def test_unpadded_shares_are_disjoint_and_cover_the_epoch(world, count):
    samplers, parts = shares(count, world)
    union = [index for part in parts for index in part]
    assert len(union) == count and len(set(union)) == count
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    steps = len(samplers[0])
    assert all(len(sampler) == steps for sampler in samplers)
    assert all(len(part) <= steps * 8 for part in parts)
    assert any(len(part) > (steps - 1) * 8 for part in parts)  # no step runs empty on every rank


@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("count", [1, 7, 100, 1001])
def test_padded_shares_are_equal_and_cover_the_epoch(world, count):
    _, parts = shares(count, world, pad=True)
    assert len({len(part) for part in parts}) == 1
    assert {index for part in parts for index in part} == set(range(count))


def test_each_epoch_is_reshuffled_and_reproducible():
    _, (first,) = shares(1000, 1, epoch=0)
    assert first != shares(1000, 1, epoch=1)[1][0]
    assert first == shares(1000, 1, epoch=0)[1][0]


def test_ranks_draw_from_one_shared_permutation_seeded_by_seed_plus_epoch():
    """DistributedSampler's draw: checkpoints taken before this sampler was shared resume onto the same shares."""
    permutation = torch.randperm(10, generator=torch.Generator().manual_seed(5 + 1)).tolist()
    _, parts = shares(10, 2, seed=5, epoch=1)
    assert parts == [permutation[0::2], permutation[1::2]]


@pytest.mark.parametrize("count, world, batch", [(1, 1, 1), (7, 3, 2), (1024, 2, 32), (1025, 8, 5), (100, 3, 64)])
def test_examples_before_counts_what_the_unpadded_batches_hand_out(count, world, batch):
    samplers, _ = shares(count, world, batch=batch, epoch=0)
    batches = [list(sampler) for sampler in samplers]
    steps = len(samplers[0])
    for step in range(steps + 2):
        handed_out = sum(len(part) for rank in batches for part in rank[:step])
        assert samplers[0].examples_before(step) == handed_out
    assert samplers[0].examples_before(steps) == count  # every example once an epoch


def test_a_resume_skips_the_batches_taken_once():
    sampler = RankBatches(100, 8, 0, 2, 0, True)
    whole = list(sampler)
    sampler.resume_at = (0, 3)
    assert list(sampler) == whole[3:]
    assert list(sampler) == whole  # the next pass is whole again
