"""Code run inside spawned gloo ranks by test_shared_load (module-level so that spawn can pickle it): rank 0 builds
the model with its weights, the others on the meta device, as worker.sft does under fsdp; each writes what it holds
after the strategy has sharded it."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainer_runtime import process_group, strategies
from trainer_runtime.distenv import DistEnv
from trainer_runtime.pretrained import shared_load

WORLD = 2


class WithFrequencies(nn.Module):
    """Two layers and a non-persistent buffer, as a rotary embedding's frequencies are: in no state dict."""

    def __init__(self, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.first, self.second = nn.Linear(8, 32, dtype=dtype), nn.Linear(32, 4, dtype=dtype)
        self.register_buffer("frequencies", torch.arange(8, dtype=dtype) / 7, persistent=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.second(F.relu(self.first(inputs * self.frequencies)))


def loaded() -> nn.Module:
    """What rank 0 reads: weights no other rank could make up."""
    torch.manual_seed(0)
    model = WithFrequencies()
    model.frequencies.mul_(3)  # not what the constructor computes: only rank 0's buffer says it
    return model


def run_rank(rank: int, port: int, out: str, other_dtype: bool) -> None:
    torch.set_num_threads(1)
    process_group.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    env = DistEnv(rank=rank, local_rank=rank, world_size=WORLD, local_world_size=WORLD, group_rank=0)
    reads = shared_load.reads_weights("fsdp")
    if reads:
        model = loaded()
    else:
        with torch.device("meta"):
            model = WithFrequencies(torch.bfloat16 if other_dtype else torch.float32)
    try:
        held(model, env, out, reads)
    finally:  # the sharded parameters hold the mesh, and with it the group: freed first, or gloo's threads outlive
        del model  # the group and abort the process as it exits (see bench/shared_load.py)
        gc.collect()
        process_group.destroy_process_group()


def held(model: nn.Module, env: DistEnv, out: str, reads: bool) -> None:
    """What this rank holds once the strategy has sharded ``model``, written to ``out`` (or why it refused)."""
    try:
        built = strategies.build("fsdp", shared_load.placed(model, torch.device("cpu")), env, torch.device("cpu"),
                                 "fp32")
    except RuntimeError as error:
        (Path(out) / f"refused-{env.rank}.txt").write_text(str(error))
        return
    local = {name: parameter.to_local().clone() for name, parameter in built.module.named_parameters()}
    torch.save({"local": local, "frequencies": built.module.frequencies.clone()}, Path(out) / f"rank-{env.rank}.pt")
    whole = built.full_model_state()  # a collective: rank 0 gets the whole model, gathered from the shards
    if env.rank == 0:
        torch.save(whole, Path(out) / "whole.pt")
    (Path(out) / f"reads-{env.rank}.json").write_text(json.dumps({
        "reads": reads, "ddp_reads": shared_load.reads_weights("ddp"), "world": dist.get_world_size()}))


def record_rank(rank: int, port: int, out: str) -> None:
    """trainer_runtime.gang.from_rank0: the digests computed by rank 0 alone, given to every rank."""
    from trainer_runtime.gang import from_rank0

    process_group.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    env = DistEnv(rank=rank, local_rank=rank, world_size=WORLD, local_world_size=WORLD, group_rank=0)

    def compute() -> dict:
        (Path(out) / f"computed-{rank}").touch()
        return {"digest": f"rank {rank}'s"}

    try:
        (Path(out) / f"got-{rank}.json").write_text(json.dumps(from_rank0(env, compute)))
    finally:
        process_group.destroy_process_group()


def every_rank_on_meta(rank: int, port: int, out: str) -> None:
    """Every rank builds on the meta device and will initialise its own shards (bench/strategy_memory.py's way):
    nothing is sent, the sharded parameters stay on the meta device for their owner to fill."""
    process_group.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    env = DistEnv(rank=rank, local_rank=rank, world_size=WORLD, local_world_size=WORLD, group_rank=0)
    with torch.device("meta"):
        model = WithFrequencies()
    try:
        built = strategies.build("fsdp", model, env, torch.device("cpu"), "fp32")
        still = all(parameter.is_meta for parameter in built.module.parameters())
        (Path(out) / f"meta-{rank}.json").write_text(json.dumps({"still_on_meta": still}))
        del built
    finally:
        del model
        gc.collect()
        process_group.destroy_process_group()
