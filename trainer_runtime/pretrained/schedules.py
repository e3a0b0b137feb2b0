"""The learning rate's schedule, LR_SCHEDULER_TYPE, as transformers' ``get_scheduler`` (and so TRL) means each name:
a linear rise from 0 over WARMUP_STEPS steps, then linear decay to 0 at the last step, half a cosine to 0, or the
peak rate kept (constant ignores the warm-up, constant_with_warmup keeps it). A factor of LEARNING_RATE per
optimizer step; tests/runtime/test_schedules.py compares every name with transformers' own."""

from __future__ import annotations

import math

import torch

from trainer_contract.program_settings import SCHEDULES


def factor(kind: str, step: int, warmup: int, total: int) -> float:
    """LEARNING_RATE's factor at optimizer step ``step`` (0 first) of ``total``."""
    if kind not in SCHEDULES:
        raise ValueError(f"no schedule {kind!r}: one of {', '.join(SCHEDULES)}")
    if kind == "constant":
        return 1.0
    if step < warmup:
        return step / max(1, warmup)
    if kind == "constant_with_warmup":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if kind == "linear":
        return max(0.0, (total - step) / max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))  # cosine, half a period


def schedule_for(optimizer: torch.optim.Optimizer, kind: str, warmup: int,
                 total: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: factor(kind, step, warmup, total))
