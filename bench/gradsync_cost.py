"""What gradient synchronization costs per step on 2 gloo ranks: the worker's one flat all-reduce, a loop of
one all-reduce per parameter, DDP, and the floor: one all-reduce of the same number of bytes."""

from __future__ import annotations

import json
import socket
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

from worker.gradsync import FlatGradients
from worker.model import MnistCNN


def _step(model, images, labels):
    F.cross_entropy(model(images), labels, reduction="sum").backward()


def _timed_sync(prepare, sync, steps: int) -> float:
    """Milliseconds of ``sync`` alone: both ranks enter it together (a barrier first), so the rank skew of
    the compute before it is not counted as communication."""
    total = 0.0
    for _ in range(steps):
        prepare()
        dist.barrier()
        started = time.perf_counter()
        sync()
        total += time.perf_counter() - started
    return total / steps * 1000


def _timed(fn, steps: int) -> float:
    dist.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        fn()
    dist.barrier()
    return (time.perf_counter() - started) / steps * 1000


def _rank(rank: int, world: int, port: int, steps: int, rounds: int, batch: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(rank)
    images, labels = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    model = MnistCNN()
    flat = FlatGradients(model.parameters(), world)
    params = list(model.parameters())
    ddp = DistributedDataParallel(MnistCNN())
    raw = torch.zeros_like(flat.buffer)

    def compute_only():
        flat.zero()
        _step(model, images, labels)

    def flat_sync():
        flat.synchronize(batch, False)

    def per_parameter():
        for p in params:
            dist.all_reduce(p.grad)
            p.grad.div_(world)

    def ddp_step():
        ddp.zero_grad()
        _step(ddp, images, labels)

    def ddp_no_sync():
        ddp.zero_grad()
        with ddp.no_sync():
            _step(ddp, images, labels)

    def one_all_reduce():
        dist.all_reduce(raw)

    for fn in (compute_only, ddp_step, ddp_no_sync, one_all_reduce):
        _timed(fn, 3)  # warm-up
    samples = {name: [] for name in ("compute", "flat", "per_parameter", "ddp", "ddp_no_sync", "floor")}
    for _ in range(rounds):  # alternate the variants, round after round
        samples["compute"].append(_timed(compute_only, steps))
        samples["flat"].append(_timed_sync(compute_only, flat_sync, steps))
        samples["per_parameter"].append(_timed_sync(compute_only, per_parameter, steps))
        samples["ddp"].append(_timed(ddp_step, steps))
        samples["ddp_no_sync"].append(_timed(ddp_no_sync, steps))
        samples["floor"].append(_timed_sync(lambda: None, one_all_reduce, steps))
    if rank == 0:
        medians = {name: statistics.median(values) for name, values in samples.items()}
        medians["bytes"] = flat.buffer.numel() * flat.buffer.element_size()
        medians["parameters"] = len(params)
        Path(out).write_text(json.dumps(medians))
    dist.destroy_process_group()


def measure(quick: bool, batch: int = 64) -> dict:
    """Milliseconds per step. The flat and per-parameter costs are timed around the synchronization itself;
    DDP overlaps it with backward, so its cost is its step time minus the same step under no_sync()."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = Path(tempfile.mkdtemp()) / "gradsync.json"
    steps, rounds = (3, 1) if quick else (30, 7)
    mp.spawn(_rank, args=(2, port, steps, rounds, batch, str(out)), nprocs=2, join=True)
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
