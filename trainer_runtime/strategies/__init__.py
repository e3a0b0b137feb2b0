"""STRATEGY: how the ranks combine their gradients. One module per strategy, each applied to the same model:

- allreduce (trainer_runtime.strategies.allreduce): one flat all-reduce per step, after backward (the default; fastest
  for a small model on CPU).
- ddp (trainer_runtime.strategies.ddp): torch's DistributedDataParallel, gradients bucketed and reduced while backward
  runs.
- fsdp (trainer_runtime.strategies.fsdp): FSDP2 (fully_shard per layer): parameters, gradients and optimizer state
  sharded, checkpoints sharded with torch.distributed.checkpoint.
- hsdp (trainer_runtime.strategies.hsdp): fsdp sharded within a node and replicated across nodes (a 2-D mesh).

Every strategy makes the same update: the gradient of the summed loss of the global batch divided by the global
sample count (also when the ranks' last batches differ in size), and tells every rank in the same step whether any
rank must stop.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

from trainer_contract.program_settings import STRATEGIES
from trainer_runtime.distenv import DistEnv
from trainer_runtime.precision import Precision
from trainer_runtime.strategies.base import Strategy

# STRATEGY's words and the class each names (this package's modules, imported only when chosen): a new strategy is
# its module there, one line here and its word in trainer_contract.program_settings.STRATEGIES.
STRATEGY_CLASSES = {
    "allreduce": "trainer_runtime.strategies.allreduce:AllReduceStrategy",
    "ddp": "trainer_runtime.strategies.ddp:DDPStrategy",
    "fsdp": "trainer_runtime.strategies.fsdp:FSDPStrategy",
    "hsdp": "trainer_runtime.strategies.hsdp:HSDPStrategy",
}
assert tuple(STRATEGY_CLASSES) == STRATEGIES, "each strategy word names one class"


def strategy_class(name: str) -> type[Strategy]:
    """The class of STRATEGY ``name`` (STRATEGY_CLASSES); its module is imported only when chosen."""
    module, _, attribute = STRATEGY_CLASSES[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def shards_parameters(name: str) -> bool:
    """Whether STRATEGY ``name`` keeps a shard of the state on each rank (its checkpoints are sharded too)."""
    return strategy_class(name).shards_parameters


def build(name: str, module: nn.Module, env: DistEnv, device: torch.device, precision: str) -> Strategy:
    chosen = strategy_class(name)
    return chosen(module, env, device, Precision(precision, device, sharded=chosen.shards_parameters))


__all__ = ["Strategy", "build", "shards_parameters", "strategy_class"]
