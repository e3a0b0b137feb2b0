"""The pod environment's own names: the variables that carry a GPU job's request to the launcher, the families of
runtime settings every PyTorch process reads, and the variables no values file may set (torchrun, the Job and this
project set them)."""

from __future__ import annotations

# A GPU job's request, in every process's environment (rendered with the ConfigMap), so that the launcher can tell
# a pod that sees fewer GPUs than it asked for before the rendezvous: resources.gpu.accelerator_count, and
# resources.gpu.cpu_fallback (true: train on the CPU after one warning line; false: exit GPU_MISSING).
GPUS_VARIABLE = "INDEXED_TRAINER_GPUS"
CPU_FALLBACK_VARIABLE = "INDEXED_TRAINER_CPU_FALLBACK"
# Families of runtime settings any PyTorch process reads (NCCL_SOCKET_IFNAME, TORCH_NCCL_..., GLOO_...):
# passed through for the built-in worker too.
RUNTIME_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "CUDA_", "PYTORCH_", "OMP_", "MKL_", "KMP_")
# NCCL's switch for its InfiniBand (verbs) transport: "0" uses the HCAs, and the launcher then checks the pod's
# locked-memory limit that the verbs transport needs.
IB_DISABLE_VARIABLE = "NCCL_IB_DISABLE"
# resources.gpu.network's presets of NCCL's transport (null: NCCL's own detection), also in the environment. tcp: no
# attempt at verbs, and more threads and sockets per connection than NCCL's defaults of 1 each (its environment
# documentation's values for 100 Gb/s networks; their product stays within its limit of 64).
NCCL_NETWORK_PRESETS = {
    "infiniband": {IB_DISABLE_VARIABLE: "0"},
    "tcp": {IB_DISABLE_VARIABLE: "1", "NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"},
}

# Variables torchrun or the Job set for every process: a user value would silently be overridden, or
# would silently override torchrun's own flags (torchrun reads PET_<FLAG> as --<flag>).
RESERVED_VARIABLES = frozenset({
    "JOB_COMPLETION_INDEX", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "RANK",
    "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_NAME", "ROLE_WORLD_SIZE", "NODE_RANK", "NNODES", "NPROC_PER_NODE",
})
RESERVED_PREFIXES = ("PET_", "TORCHELASTIC_", "INDEXED_TRAINER_")


def gpu_request(gpus: int, cpu_fallback: bool) -> dict[str, str]:
    """The variables that carry a GPU job's request to the launcher (none for a CPU job)."""
    return {GPUS_VARIABLE: str(gpus), CPU_FALLBACK_VARIABLE: str(cpu_fallback).lower()} if gpus else {}


def reserved(name: str) -> bool:
    return name in RESERVED_VARIABLES or name.startswith(RESERVED_PREFIXES)
