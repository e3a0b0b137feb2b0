"""Code run inside spawned gloo ranks by test_hsdp (module-level so that spawn can pickle it): 2 'nodes' of 2
processes each, as torchrun numbers them (node n holds ranks 2n and 2n+1)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainer_runtime import process_group, strategies
from trainer_runtime.distenv import DistEnv

NODES, PER_NODE, STEPS, BATCH = 2, 2, 3, 16


def fresh_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1234)
    return [(torch.randn(BATCH, 8, generator=generator), torch.randint(0, 4, (BATCH,), generator=generator))
            for _ in range(STEPS)]


def optimizer_for(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.5)


def run_rank(rank: int, port: int, out: str, strategy: str) -> None:
    torch.set_num_threads(1)
    world = NODES * PER_NODE
    process_group.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    env = DistEnv(rank=rank, local_rank=rank % PER_NODE, world_size=world, local_world_size=PER_NODE,
                  group_rank=rank // PER_NODE)
    built = strategies.build(strategy, fresh_model(), env, torch.device("cpu"), "fp32")
    optimizer = optimizer_for(built.module)
    built.attach(optimizer)
    share = BATCH // world
    for inputs, labels in batches():
        mine = slice(rank * share, (rank + 1) * share)
        loss = F.cross_entropy(built.model(inputs[mine]), labels[mine], reduction="sum")
        built.backward(loss, share, BATCH, False)
        built.step()
        built.zero_grad()
    weights = built.full_model_state()  # a collective: rank 0 gets the whole model
    mesh = next(built.module.parameters()).device_mesh
    layout = {"placements": sorted({str(parameter.placements) for parameter in built.module.parameters()}),
              "groups": {name: dist.get_process_group_ranks(mesh.get_group(name)) for name in mesh.mesh_dim_names or ()},
              "local_shape": list(next(built.module.parameters()).to_local().shape)}
    (Path(out) / f"layout-{rank}.json").write_text(json.dumps(layout))
    if rank == 0:
        torch.save(weights, Path(out) / "weights.pt")
    process_group.destroy_process_group()


def single_process() -> dict[str, torch.Tensor]:
    """The same steps in one process on each whole batch: what every strategy's update must equal."""
    model = fresh_model()
    optimizer = optimizer_for(model)
    for inputs, labels in batches():
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    return model.state_dict()
