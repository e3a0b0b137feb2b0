"""STRATEGY=fsdp: FSDP2 (torch.distributed.fsdp.fully_shard) on every layer that holds parameters, then on the
whole model; in a Hugging Face model, on each of its blocks (the classes its ``_no_split_modules`` names: the decoder
layers) and then on the model itself, so that ``generate`` and a wrapper's forward (peft) gather what they use.
Each rank keeps 1/world of the parameters, gradients and optimizer state; a layer's parameters are
all-gathered just before it runs and its gradients reduce-scattered after. Under PRECISION=bf16/fp16 the
gathered parameters are cast (MixedPrecisionPolicy) and the gradients reduced in fp32. Checkpoints are sharded
(trainer_runtime.checkpoints.sharded): each rank writes its own part.

The weights can come from rank 0 alone: a rank that built the model on the meta device (no weights read, no memory
taken: trainer_runtime.pretrained.shared_load) gets its shard of rank 0's weights once the model is sharded, so a
node holds one whole copy at most (rank 0's) rather than one per process."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
from typing import Any

import torch
import torch.distributed as dist
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
        whole = weights_from_rank0(module, env)  # rank 0's whole state, taken before sharding frees it
        policy = MixedPrecisionPolicy(param_dtype=precision.dtype, reduce_dtype=torch.float32)
        units, outer = shard_units(module)
        for unit in units:
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        self.root = fully_shard(outer, mesh=mesh, mp_policy=policy)
        if whole is not None:
            shard_from_rank0(module, whole, env, device)

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


def _tensors(module: nn.Module):
    return itertools.chain(module.named_parameters(), module.named_buffers())


def weights_from_rank0(module: nn.Module, env) -> dict[str, Any] | None:
    """None where every rank loaded the weights, or none did (each then initialises its own shards once the model is
    sharded, as torchtitan builds a large model: bench/strategy_memory.py); else rank 0's whole state dict (the
    other ranks: empty), once every rank's model is known to have rank 0's tensors, by name and dtype. Collective:
    every rank says whether it built the model on the meta device."""
    on_meta = any(tensor.is_meta for _, tensor in _tensors(module))
    built = [False] * env.world_size
    dist.all_gather_object(built, on_meta)
    if not any(built) or all(built):
        return None
    if built[0]:
        raise RuntimeError("rank 0 built the model without its weights: rank 0 must load them for the others")
    mine = {name: str(tensor.dtype) for name, tensor in _tensors(module)}
    layout: list[dict[str, str]] = [mine if env.rank == 0 else {}]
    dist.broadcast_object_list(layout, src=0)
    theirs = layout[0]
    differ = sorted(name for name in mine.keys() | theirs.keys() if mine.get(name) != theirs.get(name))
    said = ", ".join(f"{name}: {mine.get(name)} here, {theirs.get(name)} on rank 0" for name in differ[:3])
    problems: list[str] = [""] * env.world_size  # every rank refuses, or none: the next step is a collective
    dist.all_gather_object(problems, f"rank {env.rank}'s model is not rank 0's ({said})" if differ else "")
    first = next((problem for problem in problems if problem), None)
    if first:
        raise RuntimeError(first)
    return module.state_dict() if env.rank == 0 else {}


def shard_from_rank0(module: nn.Module, whole: dict[str, Any], env, device: torch.device) -> None:
    """Each rank's shard of rank 0's ``whole`` state, sent by rank 0 (the others materialize theirs first), and every
    buffer as rank 0 has it: a non-persistent one (a rotary embedding's frequencies) is in no state dict."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if env.rank != 0:
        module.to_empty(device=device)
    set_model_state_dict(module, whole, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for buffer in module.buffers():
        dist.broadcast(buffer, src=0)


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
