"""The model read once under a strategy that shards it (trainer_runtime/pretrained/shared_load.py,
trainer_runtime/strategies/fsdp.py): on 2 gloo ranks rank 0 reads the weights and rank 1 builds the model on the meta
device; once sharded, rank 1 holds its shard of rank 0's weights and rank 0's buffers (a non-persistent one too), and
the whole model gathered from the shards is rank 0's. A rank whose model differs is refused naming the tensor. The
record's digests of the files are computed by rank 0 alone too."""

import json

import pytest
import torch
import torch.multiprocessing as mp

from tests.mnist.launch import free_port
from tests.runtime import shared_load_ranks

pytestmark = pytest.mark.slow


def spawn(tmp_path, other_dtype: bool = False):
    tmp_path.mkdir()
    mp.spawn(shared_load_ranks.run_rank, args=(free_port(), str(tmp_path), other_dtype),
             nprocs=shared_load_ranks.WORLD, join=True)


def test_rank_1_built_without_weights_holds_its_shard_of_rank_0s(tmp_path):
    spawn(tmp_path / "shared")
    reads = [json.loads((tmp_path / "shared" / f"reads-{rank}.json").read_text()) for rank in (0, 1)]
    assert [(r["reads"], r["ddp_reads"]) for r in reads] == [(True, True), (False, True)]  # ddp: each its own copy
    expected = shared_load_ranks.loaded()
    whole = torch.load(tmp_path / "shared" / "whole.pt", weights_only=True)
    for name, value in expected.state_dict().items():
        torch.testing.assert_close(whole[name], value, rtol=0, atol=0, msg=name)
    ranks = [torch.load(tmp_path / "shared" / f"rank-{rank}.pt", weights_only=True) for rank in (0, 1)]
    first = expected.first.weight
    rows = first.shape[0] // shared_load_ranks.WORLD
    for rank, held in enumerate(ranks):  # each rank its half of the rows, rank 1's sent by rank 0
        torch.testing.assert_close(held["local"]["first.weight"], first[rank * rows:(rank + 1) * rows], rtol=0, atol=0)
        torch.testing.assert_close(held["frequencies"], expected.frequencies, rtol=0, atol=0)


def test_a_rank_whose_model_differs_from_rank_0s_is_refused_naming_the_tensor(tmp_path):
    spawn(tmp_path / "other", other_dtype=True)
    said = (tmp_path / "other" / "refused-1.txt").read_text()
    assert said.startswith("rank 1's model is not rank 0's (first.bias: torch.bfloat16 here, torch.float32 on rank 0")
    assert (tmp_path / "other" / "refused-0.txt").read_text() == said  # every rank refuses: none waits for it


def test_the_records_digests_are_computed_by_rank_0_alone_and_every_rank_gets_them(tmp_path):
    """The record's digests read every file of a model the stager does not vouch for (15 GB for a 7B model): once
    per job start, not once per process."""
    mp.spawn(shared_load_ranks.record_rank, args=(free_port(), str(tmp_path)), nprocs=shared_load_ranks.WORLD,
             join=True)
    assert sorted(path.name for path in tmp_path.glob("computed-*")) == ["computed-0"]
    assert [json.loads((tmp_path / f"got-{rank}.json").read_text()) for rank in (0, 1)] == [{"digest": "rank 0's"}] * 2


def test_a_model_every_rank_built_on_meta_is_left_for_each_to_initialise(tmp_path):
    mp.spawn(shared_load_ranks.every_rank_on_meta, args=(free_port(), str(tmp_path)), nprocs=shared_load_ranks.WORLD,
             join=True)
    assert [json.loads((tmp_path / f"meta-{rank}.json").read_text()) for rank in (0, 1)] == [
        {"still_on_meta": True}] * 2
