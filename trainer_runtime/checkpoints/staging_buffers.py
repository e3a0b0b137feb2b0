"""The copy of the training state that an asynchronous checkpoint writes from, while the training changes the
tensors in place. The buffers are kept between saves and copied into: after the first save a copy costs a memcpy,
not fresh pages (the first costs the page faults of allocating them). The price is one copy of the state held
for the whole run: of the whole model on rank 0 of a single-file checkpoint, of each rank's shards under fsdp.
A state on a GPU is copied into pinned host memory instead (torch.distributed.checkpoint's StateDictStager, as
torchtitan stages it: the device's memory holds one copy, and the copy runs at the link's speed), a DTensor
staying a DTensor whose shard is on the host, which the write saves as it would the device's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (a view: copying into it fills the DTensor), or the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _fits(buffer: Any, value: Any) -> bool:
    return (isinstance(buffer, torch.Tensor) and type(buffer) is type(value)
            and _local(buffer).shape == _local(value).shape and buffer.dtype == value.dtype)


class StagingBuffers:
    def __init__(self) -> None:
        self.spec: Any = None
        self.buffers: list[Any] = []
        self.host_stager: Any = None  # for a state on an accelerator, made on its first copy

    def copy(self, state: Any) -> Any:
        """``state`` with every tensor copied into this object's buffers (made, or remade when the state's shape
        changed); the other values as they are. The previous copy must no longer be read (the manager waits for
        the previous write before taking the next)."""
        values, spec = tree_flatten(state)
        if any(isinstance(value, torch.Tensor) and value.device.type != "cpu" for value in values):
            return self._to_host(state)
        reuse = spec == self.spec and all(
            _fits(buffer, value) for buffer, value in zip(self.buffers, values, strict=True) if isinstance(value, torch.Tensor))
        if not reuse:
            self.spec = spec
            self.buffers = [value.detach().clone() if isinstance(value, torch.Tensor) else None for value in values]
        else:
            with torch.no_grad():
                for buffer, value in zip(self.buffers, values, strict=True):
                    if isinstance(value, torch.Tensor):
                        _local(buffer).copy_(_local(value.detach()))
        return tree_unflatten([buffer if isinstance(value, torch.Tensor) else value
                               for buffer, value in zip(self.buffers, values, strict=True)], spec)

    def _to_host(self, state: Any, pin_memory: bool = True) -> Any:
        """``state`` copied into pinned host memory (kept between saves), every copy landed when this returns."""
        if self.host_stager is None:
            from torch.distributed.checkpoint.staging import StateDictStager

            self.host_stager = StateDictStager(pin_memory=pin_memory, share_memory=False)
        copied = self.host_stager.stage(state, non_blocking=pin_memory)
        if pin_memory:
            torch.accelerator.synchronize()
        return copied
