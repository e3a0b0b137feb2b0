"""Code run inside spawned gloo ranks by test_gradsync (module-level so that spawn can pickle it)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from trainer_runtime import process_group
from trainer_runtime.gradsync import FlatGradients
from worker.mnist.model import MnistCNN

STEPS = 3


def batches(sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The combined batch of each step: ``sum(sizes)`` samples, rank r's part being the r-th slice."""
    generator = torch.Generator().manual_seed(1234)
    total = sum(sizes)
    return [(torch.randn(total, 1, 28, 28, generator=generator), torch.randint(0, 10, (total,), generator=generator))
            for _ in range(STEPS)]


def part(tensor: torch.Tensor, sizes: list[int], rank: int) -> torch.Tensor:
    start = sum(sizes[:rank])
    return tensor[start:start + sizes[rank]]


def fresh_model() -> MnistCNN:
    torch.manual_seed(0)
    return MnistCNN()


def optimizer_for(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def run_rank(rank: int, world: int, port: int, sizes: list[int], out: str, with_ddp: bool) -> None:
    torch.set_num_threads(1)
    process_group.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    data = batches(sizes)

    model = fresh_model()
    optimizer = optimizer_for(model)
    grads = FlatGradients(model.parameters(), world)
    for images, labels in data:
        grads.zero()
        x, y = part(images, sizes, rank), part(labels, sizes, rank)
        F.cross_entropy(model(x), y, reduction="sum").backward()
        grads.synchronize(len(x), False)
        assert grads.is_intact()
        optimizer.step()
    torch.save(model.state_dict(), Path(out) / f"flat-{rank}.pt")

    if with_ddp:
        ddp = DistributedDataParallel(fresh_model())
        optimizer = optimizer_for(ddp)
        for images, labels in data:
            optimizer.zero_grad()
            F.cross_entropy(ddp(part(images, sizes, rank)), part(labels, sizes, rank)).backward()
            optimizer.step()
        torch.save(ddp.module.state_dict(), Path(out) / f"ddp-{rank}.pt")
    process_group.destroy_process_group()


def single_process(sizes: list[int]) -> dict:
    model = fresh_model()
    optimizer = optimizer_for(model)
    for images, labels in batches(sizes):
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
    return model.state_dict()
