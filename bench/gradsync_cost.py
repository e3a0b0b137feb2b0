"""What gradient synchronization costs per step on 2 gloo ranks: the worker's one flat all-reduce, a loop of
one all-reduce per parameter, DDP, and the floor: one all-reduce of the same number of bytes."""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from localjob.ports import free_port
from trainer_runtime import process_group
from trainer_runtime.gradsync import FlatGradients
from worker.mnist.model import MnistCNN


def _step(model, images, labels):
    F.cross_entropy(model(images), labels, reduction="sum").backward()


def _rank(rank: int, world: int, port: int, steps: int, batch: int, out: str) -> None:
    torch.set_num_threads(1)
    process_group.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(rank)
    images, labels = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    model = MnistCNN()
    flat = FlatGradients(model.parameters(), world)
    params = list(model.parameters())
    ddp = DistributedDataParallel(MnistCNN())

    def compute():
        flat.zero()
        _step(model, images, labels)

    def per_parameter():
        for p in params:
            dist.all_reduce(p.grad)
            p.grad.div_(world)

    def ddp_step(sync: bool):
        ddp.zero_grad()
        if sync:
            _step(ddp, images, labels)
        else:
            with ddp.no_sync():
                _step(ddp, images, labels)

    # (name, work before the clock starts, the timed work). Communication variants start together (a barrier
    # after the compute), so the ranks' compute skew is not counted as communication; DDP overlaps its
    # all-reduce with backward, so its whole step is timed, with and without sync.
    variants = [
        ("compute", lambda: None, compute),
        ("flat", compute, lambda: flat.synchronize(batch, False)),
        ("per_parameter", compute, per_parameter),
        # the floor: a bare all-reduce of the very same buffer (same bytes, same memory), nothing around it
        ("floor", compute, lambda: dist.all_reduce(flat.buffer)),
        ("ddp", lambda: None, lambda: ddp_step(True)),
        ("ddp_no_sync", lambda: None, lambda: ddp_step(False)),
    ]
    samples = {name: [] for name, _, _ in variants}
    for step in range(steps + 3):
        # interleaved step by step, in an order shuffled per step (the same on both ranks): the machine's
        # noise and any effect of what ran just before fall on every variant alike
        order = list(variants)
        random.Random(step).shuffle(order)
        for name, prepare, timed in order:
            prepare()
            dist.barrier()
            started = time.perf_counter()
            timed()
            if step >= 3:  # the first steps warm up
                samples[name].append((time.perf_counter() - started) * 1000)
    if rank == 0:
        medians = {name: statistics.median(values) for name, values in samples.items()}
        medians["bytes"] = flat.buffer.numel() * flat.buffer.element_size()
        medians["parameters"] = len(params)
        Path(out).write_text(json.dumps(medians))
    process_group.destroy_process_group()


def measure(quick: bool, batch: int = 64) -> dict:
    """Median milliseconds per step. The flat and per-parameter costs and the floor (one all-reduce of a buffer
    of the same size) are timed around the communication itself; DDP overlaps its all-reduce with backward,
    so its cost is its step time minus the same step under no_sync()."""
    port = free_port()
    out = Path(tempfile.mkdtemp()) / "gradsync.json"
    mp.spawn(_rank, args=(2, port, 4 if quick else 200, batch, str(out)), nprocs=2, join=True)
    m = json.loads(out.read_text())
    result = {
        "flat_ms": m["flat"],
        "per_parameter_ms": m["per_parameter"],
        "ddp_ms": m["ddp"] - m["ddp_no_sync"],
        "one_all_reduce_ms": m["floor"],
        "compute_step_ms": m["compute"],
        "ddp_step_ms": m["ddp"],
        "bytes": m["bytes"],
        "parameter_tensors": m["parameters"],
    }
    result["flat_fraction"] = m["flat"] / (m["compute"] + m["flat"])
    result["per_parameter_fraction"] = m["per_parameter"] / (m["compute"] + m["per_parameter"])
    result["ddp_fraction"] = result["ddp_ms"] / m["ddp"]
    return result


if __name__ == "__main__":
    json.dump(measure("--quick" in sys.argv), sys.stdout, indent=2)
