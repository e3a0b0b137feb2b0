"""STRATEGY=hsdp on 4 gloo ranks laid out as 2 nodes x 2 processes: the state is sharded within a node and
replicated across nodes (FSDP2 on a 2-D mesh), and the update is the one a single process makes on the whole batch,
as under every other strategy."""

import json

import pytest
import torch
import torch.multiprocessing as mp

from tests.mnist.launch import free_port
from tests.runtime import hsdp_ranks

pytestmark = pytest.mark.slow


def spawn(strategy, tmp_path):
    world = hsdp_ranks.NODES * hsdp_ranks.PER_NODE
    tmp_path.mkdir()
    mp.spawn(hsdp_ranks.run_rank, args=(free_port(), str(tmp_path), strategy), nprocs=world, join=True)
    layouts = [json.loads((tmp_path / f"layout-{rank}.json").read_text()) for rank in range(world)]
    return torch.load(tmp_path / "weights.pt", weights_only=True), layouts


def test_hsdp_shards_within_a_node_replicates_across_nodes_and_updates_as_one_process_on_the_whole_batch(tmp_path):
    weights, layouts = spawn("hsdp", tmp_path / "hsdp")
    # rank r is process r % 2 of node r // 2: its shard group is its node, its replicas the same process elsewhere
    assert [layout["groups"] for layout in layouts] == [
        {"replicate": [0, 2], "shard": [0, 1]}, {"replicate": [1, 3], "shard": [0, 1]},
        {"replicate": [0, 2], "shard": [2, 3]}, {"replicate": [1, 3], "shard": [2, 3]}]
    assert layouts[0]["placements"] == ["(Replicate(), Shard(dim=0))"]
    assert layouts[0]["local_shape"] == [16, 8]  # the first layer's 32 rows, halved within the node
    single = hsdp_ranks.single_process()
    for name, value in single.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-5, atol=1e-5, msg=name)
    moved = max((single[name] - hsdp_ranks.fresh_model().state_dict()[name]).abs().max() for name in single)
    assert moved > 1e-2  # the comparison is of trained weights

    # fsdp on the same ranks: one shard group of all four, the same update
    flat, flat_layouts = spawn("fsdp", tmp_path / "fsdp")
    assert flat_layouts[0]["placements"] == ["(Shard(dim=0),)"] and flat_layouts[0]["local_shape"] == [8, 8]
    for name, value in single.items():
        torch.testing.assert_close(flat[name], value, rtol=1e-5, atol=1e-5, msg=name)
