"""What the built-in worker (entrypoint.module: worker) reads from its environment, for checking config_map.

The generator must not import the worker (it would pull its dependencies into every render); this copy of the
names is kept equal to worker/config.py by tests/generator/test_worker_variables.py.
"""

BUILT_IN_WORKER = "worker"

WORKER_VARIABLES = frozenset({
    "EPOCHS", "BATCH_SIZE", "LEARNING_RATE", "SEED", "DATA_DIR", "OUTPUT_DIR", "DATA_SHARED", "DOWNLOAD",
    "MNIST_MIRROR", "MNIST_CHECKSUMS", "MNIST_SAMPLE_FALLBACK", "TRAIN_SAMPLES", "LOG_INTERVAL",
    "CHECKPOINT_EVERY", "KEEP_CHECKPOINTS", "RESUME", "COLLECTIVE_TIMEOUT", "DOWNLOAD_TIMEOUT",
    "STRATEGY", "PRECISION", "TENSORBOARD",
    "FAULT_INJECT",  # tests only (worker/faults.py)
})

# The worker's variables that take one of a few words (worker/config.py STRATEGIES, PRECISIONS): checked at
# render time so that a typo fails `gen-manifests`, not a pod.
WORKER_CHOICES = {
    "STRATEGY": ("allreduce", "ddp", "fsdp"),
    "PRECISION": ("fp32", "bf16", "fp16"),
}

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
