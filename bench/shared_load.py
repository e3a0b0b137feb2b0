"""The shared-load row of python -m bench.transformers: the host memory a node's processes take to load a causal LM
and shard it under fsdp, with the weights read by rank 0 alone and sent to the others as their shards
(trainer_runtime.pretrained.shared_load) against every rank reading them (INDEXED_TRAINER_EVERY_RANK_READS), as
worker.sft loads its model. Measured once each (a peak of resident memory does not depend on the machine's load):

- the sum over the ranks of their peaks of resident memory once the model is sharded (VmHWM), less the same after
  their imports (torch, transformers, peft: the same both ways), i.e. what loading the model takes. Goal <= 1.

On a GPU node this is the host's peak: the weights then live on the GPUs. Training on this machine's CPUs keeps its
state in the same memory, so a whole run's peak would hide the load; the row measures the load itself, with the
product's own code (worker.sft.model.load, the strategy).
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import torch
import torch.multiprocessing as mp

from bench.stats import verdict
from localjob.ports import free_port
from trainer_runtime.pretrained.shared_load import EVERY_RANK_READS_VARIABLE


def sizes(size: str) -> dict:
    """The Llama loaded and the numbers of processes (a node's) it is loaded by."""
    if size == "quick":
        return {"hidden": 64, "layers": 2, "worlds": (2,)}
    return {"hidden": 1024, "layers": 8, "worlds": (2, 4)}


def _peak_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def load_rank(rank: int, world: int, port: int, model_dir: str, every_rank_reads: bool, out: str) -> None:
    """One process of the node: the libraries imported, the model loaded as worker.sft loads it, then sharded."""
    torch.set_num_threads(1)
    if every_rank_reads:
        os.environ[EVERY_RANK_READS_VARIABLE] = "1"
    from trainer_runtime import process_group, strategies
    from trainer_runtime.distenv import DistEnv
    from trainer_runtime.pretrained import shared_load
    from worker.sft import model as sft_model

    process_group.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    env = DistEnv(rank=rank, local_rank=rank, world_size=world, local_world_size=world, group_rank=0)
    import peft  # noqa: F401 -- what worker.sft has imported before it loads the model
    import transformers  # noqa: F401

    imported = _peak_kib()
    model = sft_model.load(Path(model_dir), None, weights=shared_load.reads_weights("fsdp"))
    built = strategies.build("fsdp", shared_load.placed(model, torch.device("cpu")), env, torch.device("cpu"), "fp32")
    Path(out, f"rank-{rank}.json").write_text(json.dumps({"imported_kib": imported, "peak_kib": _peak_kib()}))
    del built, model  # the sharded parameters hold the mesh, and with it the group: freed first, or gloo's threads
    gc.collect()      # outlive the group and abort the process as it exits
    process_group.destroy_process_group()


def node_mib(model_dir: Path, world: int, every_rank_reads: bool, scratch: Path) -> dict:
    """The node's processes' peaks of resident memory once the model is sharded, summed (and each, and after the
    imports alone)."""
    out = scratch / f"load-{world}-{'each' if every_rank_reads else 'once'}"
    out.mkdir(parents=True)
    mp.spawn(load_rank, args=(world, free_port(), str(model_dir), every_rank_reads, str(out)), nprocs=world,
             join=True)
    ranks = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(world)]
    return {"node_mib": sum(rank["peak_kib"] for rank in ranks) / 1024,
            "imported_mib": sum(rank["imported_kib"] for rank in ranks) / 1024,
            "per_rank_mib": [rank["peak_kib"] / 1024 for rank in ranks]}


def measure(size_name: str, scratch: Path, log) -> dict:
    from safetensors import safe_open

    from testbed.sft_data import make_model

    size = sizes(size_name)
    model = make_model(scratch / "shared-load-llama", hidden=size["hidden"], layers=size["layers"])
    with safe_open(model / "model.safetensors", "pt") as weights:  # counted from the header: nothing loaded
        parameters = sum(torch.Size(weights.get_slice(name).get_shape()).numel() for name in weights.keys())
    results: dict = {"layers": size["layers"], "hidden": size["hidden"], "parameters": parameters}
    for world in size["worlds"]:
        log(f"host memory of {world} processes loading and sharding the model: read once, then by each...")
        results[str(world)] = {"once": node_mib(model, world, False, scratch), "each": node_mib(model, world, True,
                                                                                                    scratch)}
    return {"shared_load": results}


def rows(r: dict) -> list[tuple[str, ...]]:
    load = r["shared_load"]
    model = f"Llama {load['layers']}x{load['hidden']} ({load['parameters'] / 1e6:.1f} M params, fp32)"
    lines = []
    for world in sorted((key for key in load if key.isdigit()), key=int):
        once, each = (load[world][way]["node_mib"] - load[world][way]["imported_mib"] for way in ("once", "each"))
        lines.append((f"host memory a node's {world} processes take to load and shard {model} under fsdp, over "
                      "their imports (MiB)", f"{once:.0f} (read by rank 0)", f"{each:.0f} (read by each)",
                      f"{once / each:.2f}", verdict(once / each, 1, True)))
    return lines
