"""PRECISION: the dtype the forward and backward compute in; weights, optimizer state and gradient reduction stay
fp32.

fp32: no casting. bf16: autocast (under fsdp, FSDP2's MixedPrecisionPolicy casts the gathered parameters instead,
see trainer_runtime.strategies.fsdp). fp16: autocast plus a gradient scaler, whose loss scaling keeps small fp16 gradients
from flushing to zero; its scale is part of every checkpoint. fp16 runs on CUDA only: on a CPU it is a
configuration error (exit 78), not a silent fallback.
"""

from __future__ import annotations

import contextlib

import torch

from trainer_contract.program_settings import FP16_NEEDS_CUDA
from trainer_contract.settings import ConfigError

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def require_supported(name: str, device: torch.device) -> None:
    if name == "fp16" and device.type != "cuda":
        raise ConfigError([f"PRECISION: {FP16_NEEDS_CUDA} and this process runs on {device.type}: use bf16 or "
                           "fp32 here"])


class Precision:
    def __init__(self, name: str, device: torch.device, sharded: bool):
        require_supported(name, device)
        self.name, self.device = name, device
        self.dtype = DTYPES[name]
        self.casts_in_model = sharded  # FSDP's policy casts; autocast on top would only add casts
        self.scaler: torch.amp.GradScaler | None = None
        if name == "fp16":
            if sharded:  # each rank holds a shard of the gradients: the inf check must be agreed on by all
                from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

                self.scaler = ShardedGradScaler("cuda")
            else:
                self.scaler = torch.amp.GradScaler("cuda")

    def autocast(self):
        if self.dtype is None or self.casts_in_model:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Before clipping: the gradients as they are, not scaled by the loss scale."""
        if self.scaler:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler:
            self.scaler.step(optimizer)  # unscales; skips the step when a gradient overflowed
            self.scaler.update()
        else:
            optimizer.step()

    def state_dict(self) -> dict | None:
        return self.scaler.state_dict() if self.scaler else None

    def load_state_dict(self, state: dict | None) -> None:
        if self.scaler and state:
            self.scaler.load_state_dict(state)
