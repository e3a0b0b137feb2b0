"""Start the gang's process group so that destroying it really ends it.

torch.distributed.nn.functional binds ``group.WORLD`` as default arguments when it is first imported, and
torch.optim imports it lazily (through torch._dynamo) when the first optimizer is built. Imported after
init_process_group, those defaults hold the default group for good: destroy_process_group cannot free it,
gloo's worker threads outlive it, and one of them may release the last collective's tensors while the
interpreter shuts down. That is std::terminate, SIGABRT, and a rank that finished its work exits -6, so torchrun
reports the gang failed (about 1 two-rank run in 10 here). Importing the module first keeps the group freeable.
"""

from __future__ import annotations

import torch.distributed as dist


def init_process_group(backend: str, **kwargs) -> None:
    import torch.distributed.nn  # noqa: F401  (must precede init_process_group; see the module docstring)

    dist.init_process_group(backend, **kwargs)


def destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
