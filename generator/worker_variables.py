"""What the built-in worker (entrypoint.module: worker) reads from its environment, for checking config_map.

Read from the worker's own definitions (worker/config.py, worker/faults.py), which import no torch: one fact,
one place, so a new worker variable is known to the generator the moment the worker reads it.
"""

from worker.config import BUILT_IN_WORKER, config_fields, variable_choices
from worker.faults import ENV as FAULT_INJECT

__all__ = ["BUILT_IN_WORKER", "WORKER_VARIABLES", "WORKER_CHOICES", "RUNTIME_PREFIXES", "reserved"]

WORKER_VARIABLES = frozenset({item.metadata["env"] for item in config_fields()} | {FAULT_INJECT})

# The variables that take one of a few words (STRATEGY, PRECISION): checked at render time, so that a typo
# fails `gen-manifests`, not a pod.
WORKER_CHOICES = variable_choices()

# Families of runtime settings any PyTorch process reads (NCCL_SOCKET_IFNAME, TORCH_NCCL_..., GLOO_...):
# passed through for the built-in worker too.
RUNTIME_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "CUDA_", "PYTORCH_", "OMP_", "MKL_", "KMP_")

# Variables torchrun or the Job set for every process: a user value would silently be overridden, or
# would silently override torchrun's own flags (torchrun reads PET_<FLAG> as --<flag>).
RESERVED_VARIABLES = frozenset({
    "JOB_COMPLETION_INDEX", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "RANK",
    "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_NAME", "ROLE_WORLD_SIZE", "NODE_RANK", "NNODES", "NPROC_PER_NODE",
})
RESERVED_PREFIXES = ("PET_", "TORCHELASTIC_")


def reserved(name: str) -> bool:
    return name in RESERVED_VARIABLES or name.startswith(RESERVED_PREFIXES)
