"""STRATEGY=fsdp: FSDP2 (torch.distributed.fsdp.fully_shard) on every layer that holds parameters, then on the
whole model; in a Hugging Face model, on each of its blocks (the classes its ``_no_split_modules`` names: the decoder
layers) and then on the model itself, so that ``generate`` and a wrapper's forward (peft) gather what they use.
Each rank keeps 1/world of the parameters, gradients and optimizer state; a layer's parameters are
all-gathered just before it runs and its gradients reduce-scattered after. Under PRECISION=bf16/fp16 the
gathered parameters are cast (MixedPrecisionPolicy) and the gradients reduced in fp32. Checkpoints are sharded
(trainer_runtime.checkpoints.sharded): each rank writes its own part."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer_runtime.strategies.base import Strategy


class FSDPStrategy(Strategy):
    name = "fsdp"
    shards_parameters = True

    def __init__(self, module, env, device, precision):
        super().__init__(module, env, device, precision)
        mesh = init_device_mesh(device.type, (env.world_size,))
        policy = MixedPrecisionPolicy(param_dtype=precision.dtype, reduce_dtype=torch.float32)
        units, outer = shard_units(module)
        for unit in units:
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        fully_shard(outer, mesh=mesh, mp_policy=policy)


def shard_units(module: nn.Module) -> tuple[list[nn.Module], nn.Module]:
    """(the modules sharded one by one, the outer module sharded last). A Hugging Face model (found inside a
    wrapper too): its blocks, then itself; any other module: every layer that holds parameters, then itself."""
    for candidate in module.modules():
        blocks = set(getattr(candidate, "_no_split_modules", None) or ())
        if blocks:
            units = [layer for layer in candidate.modules() if type(layer).__name__ in blocks]
            if units:
                return units, candidate
    return [layer for layer in module.modules()
            if layer is not module and any(True for _ in layer.parameters(recurse=False))], module
