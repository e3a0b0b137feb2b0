"""Gradient averaging with one all-reduce per step over a single flat buffer.

Every parameter's ``.grad`` is a view into one contiguous buffer, so backward writes the gradients straight
into it and no copy is needed before or after the collective. Three control slots ride along at the end:
the number of samples this process used in the step, whether it was asked to stop (SIGTERM), and whether its
clock says a checkpoint is due (rank 0's alone votes: trainer_runtime.checkpoints.clock). After the all-reduce the
gradients are divided by the global sample count, which makes the update exactly that of one process on the
combined batch, also when the ranks' batches differ in size (the last step of an epoch), and every rank learns in
the same step whether any rank must stop and whether to checkpoint.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist


class StepAgreement(NamedTuple):
    """What the gang agreed in a step's collective, besides the gradients (every rank the same)."""

    samples: int  # the step's samples over every rank
    stop: bool  # some rank was asked to stop
    checkpoint: bool  # a checkpoint is due by time (rank 0's clock)


class FlatGradients:
    def __init__(self, parameters, world_size: int):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.world_size = world_size
        total = sum(p.numel() for p in self.parameters)
        first = self.parameters[0]
        self.buffer = torch.zeros(total + 3, dtype=first.dtype, device=first.device)
        self.gradients = self.buffer[:total]
        self._control = self.buffer[total:]  # samples, stop, checkpoint
        offset = 0
        for parameter in self.parameters:
            count = parameter.numel()
            parameter.grad = self.buffer[offset:offset + count].view_as(parameter)
            offset += count

    def zero(self) -> None:
        """Clear the gradients (never optimizer.zero_grad(), which would replace the views with new tensors)."""
        self.buffer.zero_()

    def is_intact(self) -> bool:
        """True while every .grad is still a view into the buffer (for tests and debugging)."""
        start, end = self.buffer.data_ptr(), self.buffer.data_ptr() + self.buffer.numel() * self.buffer.element_size()
        return all(p.grad is not None and start <= p.grad.data_ptr() < end for p in self.parameters)

    def synchronize(self, samples: int, stop_requested: bool, checkpoint_due: bool = False) -> StepAgreement:
        """Sum gradients and control slots over all ranks, average by samples; return what the gang agreed."""
        for slot, value in zip(self._control, (samples, stop_requested, checkpoint_due), strict=True):
            slot.fill_(float(value))  # no host-to-device copy: on CUDA it would wait for the stream
        if self.world_size > 1:
            dist.all_reduce(self.buffer)
        total_samples, stops, checkpoints = self._control.tolist()
        if total_samples > 0:
            self.gradients.div_(total_samples)
        return StepAgreement(int(total_samples), stops > 0, checkpoints > 0)
