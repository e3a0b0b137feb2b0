"""STRATEGY=fsdp: FSDP2 (torch.distributed.fsdp.fully_shard) on every layer that holds parameters, then on the
whole model; in a Hugging Face model, on each of its blocks (the classes its ``_no_split_modules`` names: the decoder
layers) and then on the model itself, so that ``generate`` and a wrapper's forward (peft) gather what they use.
Each rank keeps 1/world of the parameters, gradients and optimizer state; a layer's parameters are
all-gathered just before it runs and its gradients reduce-scattered after. Under PRECISION=bf16/fp16 the
gathered parameters are cast (MixedPrecisionPolicy) and the gradients reduced in fp32. Checkpoints are sharded
(trainer_runtime.checkpoints.sharded): each rank writes its own part."""

from __future__ import annotations

import contextlib
import ctypes

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer_runtime.strategies.base import Strategy

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
UNMAPPED_FROM_BYTES = 1 << 20  # a transformer block's parameters and gradients are 1 MiB and more each


def unmap_large_buffers_when_freed(threshold: int = UNMAPPED_FROM_BYTES) -> bool:
    """Have the C library map every buffer of ``threshold`` bytes or more apart and unmap it when freed (glibc's
    M_MMAP_THRESHOLD, for the whole process); True where it took. FSDP gathers every unit's parameters and makes
    its unsharded gradients at each step, then frees them; glibc by default raises its threshold to the largest
    buffer freed so far (up to 32 MiB), after which such buffers come from its heap, whose freed pages stay
    resident: 161 MiB of a rank's peak on worker.qa's 67 M-parameter BERT (docs/performance.md). False where the
    C library has no mallopt (not glibc): nothing is changed there."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, threshold) == 1


class FSDPStrategy(Strategy):
    name = "fsdp"
    shards_parameters = True

    def __init__(self, module, env, device, precision):
        super().__init__(module, env, device, precision)
        unmap_large_buffers_when_freed()  # the units' gathered parameters and gradients, freed at every step
        mesh = self.device_mesh(env, device)
        policy = MixedPrecisionPolicy(param_dtype=precision.dtype, reduce_dtype=torch.float32)
        units, outer = shard_units(module)
        for unit in units:
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        self.root = fully_shard(outer, mesh=mesh, mp_policy=policy)

    def device_mesh(self, env, device) -> DeviceMesh:
        """Every rank in one dimension: each holds 1/world of the state."""
        return init_device_mesh(device.type, (env.world_size,))

    @contextlib.contextmanager
    def local_gradients(self):
        # every unit keeps its unsharded gradients and adds the next backward's: no reduce-scatter until the last
        self.root.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.root.set_requires_gradient_sync(True)


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
