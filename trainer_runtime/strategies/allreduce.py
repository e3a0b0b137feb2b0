"""STRATEGY=allreduce: after backward, one all-reduce of every gradient in one flat buffer (trainer_runtime.gradsync)."""

from __future__ import annotations

import contextlib
import time

import torch

from trainer_runtime.gradsync import FlatGradients
from trainer_runtime.strategies.base import Strategy


class AllReduceStrategy(Strategy):
    name = "allreduce"

    @property
    def forwards_empty_batches(self) -> bool:
        return False  # the collective is after backward: a rank with no samples just sends zeros

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        super().attach(optimizer)
        self.grads = FlatGradients(self.module.parameters(), self.world_size)

    def zero_grad(self) -> None:
        self.grads.zero()  # never optimizer.zero_grad(): the .grad views into the buffer must stay

    def backward(self, loss, samples, global_samples, stop_requested, checkpoint_due=False):
        if loss is not None:
            self.precision.backward(loss)
        started = time.perf_counter()
        synchronized = self.grads.synchronize(samples, stop_requested, checkpoint_due)
        self.sync_seconds = time.perf_counter() - started
        return synchronized

    @contextlib.contextmanager
    def optimizer_state_initializable(self):
        views = [p.grad for p in self.grads.parameters]
        for parameter in self.grads.parameters:
            parameter.grad = None
        try:
            yield
        finally:
            for parameter, view in zip(self.grads.parameters, views, strict=True):
                parameter.grad = view
