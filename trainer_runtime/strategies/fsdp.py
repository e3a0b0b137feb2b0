"""STRATEGY=fsdp: FSDP2 (torch.distributed.fsdp.fully_shard) on every layer that holds parameters, then on the
whole model. Each rank keeps 1/world of the parameters, gradients and optimizer state; a layer's parameters are
all-gathered just before it runs and its gradients reduce-scattered after. Under PRECISION=bf16/fp16 the
gathered parameters are cast (MixedPrecisionPolicy) and the gradients reduced in fp32. Checkpoints are sharded
(trainer_runtime.checkpoints.sharded): each rank writes its own part."""

from __future__ import annotations

import torch
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
        for layer in module.modules():
            if layer is not module and any(True for _ in layer.parameters(recurse=False)):
                fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(module, mesh=mesh, mp_policy=policy)
