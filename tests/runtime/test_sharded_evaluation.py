"""trainer_runtime.sharded_evaluation: every rank runs as many batches, the counted ones cover the split once."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from trainer_runtime.sharded_evaluation import evaluating, rank_batches


@given(st.integers(1, 60), st.integers(1, 8), st.integers(1, 9))
def test_every_rank_runs_as_many_batches_and_the_counted_ones_cover_the_split_once(total, world_size, batch_size):
    items, labels = list(range(total)), torch.arange(total) * 10
    counted, runs = [], set()
    for rank in range(world_size):
        batches = list(rank_batches(batch_size, rank, world_size, items, labels))
        runs.add(len(batches))
        for (part, part_labels), counts in batches:
            assert len(part) and len(part) <= batch_size and (part_labels == torch.tensor(part) * 10).all()
            if counts:
                counted.extend(part)
            else:
                assert part == items[:1]  # the stand-in
    assert len(runs) == 1  # the FSDP-safe rule
    assert sorted(counted) == items


def test_evaluating_runs_without_gradients_and_gives_the_model_back_in_training_mode():
    model = torch.nn.Linear(2, 1)
    with evaluating(model):
        assert not model.training and not model(torch.ones(1, 2)).requires_grad
    assert model.training
