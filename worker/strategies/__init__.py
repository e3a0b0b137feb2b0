"""STRATEGY: how the ranks combine their gradients. One module per strategy, each applied to the same model:

- allreduce (worker.strategies.allreduce): one flat all-reduce per step, after backward (the default; fastest
  for a small model on CPU).
- ddp (worker.strategies.ddp): torch's DistributedDataParallel, gradients bucketed and reduced while backward
  runs.
- fsdp (worker.strategies.fsdp): FSDP2 (fully_shard per layer): parameters, gradients and optimizer state
  sharded, checkpoints sharded with torch.distributed.checkpoint.

Every strategy makes the same update: the gradient of the summed loss of the global batch divided by the global
sample count (also when the ranks' last batches differ in size), and tells every rank in the same step whether any
rank must stop.
"""

from __future__ import annotations

import torch
from torch import nn

from worker.distenv import DistEnv
from worker.precision import Precision
from worker.strategies.base import Strategy


def build(name: str, module: nn.Module, env: DistEnv, device: torch.device, precision: str) -> Strategy:
    chosen: type[Strategy]
    if name == "ddp":
        from worker.strategies.ddp import DDPStrategy as chosen
    elif name == "fsdp":
        from worker.strategies.fsdp import FSDPStrategy as chosen
    else:
        from worker.strategies.allreduce import AllReduceStrategy as chosen
    return chosen(module, env, device, Precision(precision, device, sharded=chosen.sharded_checkpoints))


__all__ = ["Strategy", "build"]
