"""How many batches of BATCH_SIZE each process sums before a step, the rule in one place: the render checks it
against the job's processes (replicas x processes per pod), the training skeleton applies it. Torch-free."""

from __future__ import annotations

from typing import Any


def accumulation_problem(config: Any, world_size: int) -> str | None:
    """Why GLOBAL_BATCH_SIZE cannot be kept on ``world_size`` processes (a line naming the variable), or None."""
    wanted = config.global_batch_size
    if not wanted:
        return None
    if config.gradient_accumulation_steps != 1:
        return (f"GLOBAL_BATCH_SIZE: {wanted} sets the accumulation itself; remove GRADIENT_ACCUMULATION_STEPS="
                f"{config.gradient_accumulation_steps} (or GLOBAL_BATCH_SIZE)")
    per_pass = config.batch_size * world_size
    if wanted % per_pass:
        return (f"GLOBAL_BATCH_SIZE: {wanted} examples a step is no whole number of passes of BATCH_SIZE "
                f"{config.batch_size} x {world_size} processes ({per_pass} examples); use a multiple of {per_pass}")
    return None


def accumulation_steps(config: Any, world_size: int) -> int:
    """GRADIENT_ACCUMULATION_STEPS, or the batches that keep GLOBAL_BATCH_SIZE's examples a step on
    ``world_size`` processes (``accumulation_problem`` first)."""
    if config.global_batch_size:
        return config.global_batch_size // (config.batch_size * world_size)
    return config.gradient_accumulation_steps
