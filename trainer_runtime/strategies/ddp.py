"""STRATEGY=ddp: torch's DistributedDataParallel. Gradients are reduced in buckets while backward still runs,
which hides most of the communication behind computation on a large model (on GPUs, with NCCL)."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from trainer_runtime.strategies.base import Strategy


class DDPStrategy(Strategy):
    name = "ddp"

    def __init__(self, module, env, device, precision):
        super().__init__(module, env, device, precision)
        # module stays the plain model: checkpoints and model.pt hold its names, without DDP's "module." prefix.
        # A transformer's buffers (position ids, rotary frequencies) are constants: broadcasting them before every
        # forward, DDP's default, is a collective a step for nothing; batch norms' running statistics do change.
        statistics = any(isinstance(layer, torch.nn.modules.batchnorm._BatchNorm) for layer in module.modules())
        self.wrapped = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None,
                                               broadcast_buffers=statistics, gradient_as_bucket_view=True)

    @property
    def model(self):
        return self.wrapped

    def local_gradients(self):
        return self.wrapped.no_sync()
