"""The flat all-reduce against DDP and against one process on the combined batch (real gloo ranks)."""

import pytest
import torch
import torch.multiprocessing as mp

from tests.mnist.launch import free_port
from tests.runtime import gradsync_ranks


def spawn(sizes, tmp_path, with_ddp):
    mp.spawn(gradsync_ranks.run_rank, args=(len(sizes), free_port(), sizes, str(tmp_path), with_ddp),
             nprocs=len(sizes), join=True)
    return [torch.load(tmp_path / f"flat-{rank}.pt", weights_only=True) for rank in range(len(sizes))]


def assert_same(first: dict, second: dict, tolerance=1e-5):
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=tolerance, atol=tolerance, msg=name)


@pytest.mark.slow
def test_flat_all_reduce_equals_ddp_and_one_process_on_the_combined_batch(tmp_path):
    sizes = [8, 8]
    flat = spawn(sizes, tmp_path, with_ddp=True)
    ddp = [torch.load(tmp_path / f"ddp-{rank}.pt", weights_only=True) for rank in range(2)]
    single = gradsync_ranks.single_process(sizes)
    assert_same(flat[0], flat[1], tolerance=0)  # every rank holds the same model
    assert_same(flat[0], ddp[0])
    assert_same(flat[0], single)
    moved = max((single[k] - gradsync_ranks.fresh_model().state_dict()[k]).abs().max() for k in single)
    assert moved > 1e-3  # the comparison is about trained weights, not the initial ones


@pytest.mark.slow
def test_uneven_batches_still_equal_one_process_on_the_combined_batch(tmp_path):
    """The last step of an epoch gives ranks different batch sizes; the update must not depend on the split."""
    sizes = [7, 2, 0]
    flat = spawn(sizes, tmp_path, with_ddp=False)
    assert_same(flat[0], gradsync_ranks.single_process(sizes))
    assert_same(flat[0], flat[2], tolerance=0)
