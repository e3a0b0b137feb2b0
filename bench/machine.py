"""This machine's float32 matrix-multiply rate at a given thread count: the ceiling the training is held to."""

from __future__ import annotations

import time

import torch

from worker.mnist.model import FORWARD_MACS

# A training step is a forward pass and a backward pass (gradients of activations and of weights): about
# 3x the forward's multiply-adds, 2 FLOPs each.
TRAINING_FLOPS_PER_IMAGE = 3 * 2 * FORWARD_MACS


def matmul_flops(threads: int, size: int = 512, seconds: float = 1.0) -> float:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        for _ in range(3):
            a @ b
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            a @ b
            count += 1
        return 2 * size**3 * count / (time.perf_counter() - started)
    finally:
        torch.set_num_threads(previous)
