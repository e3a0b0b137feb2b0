"""The built-in worker's interface, stated once and without torch, for everything that starts or checks it:
the generator (renders and validation), local-job, the Slurm target, the launcher and the docs.

The variables are TrainConfig's fields (worker/config.py: name, type, default, range or choices, help) and the
exit codes are worker/exit_codes.py: this module gathers the rest, and the views the others need.
"""

from __future__ import annotations

import signal

from worker import exit_codes
from worker.config import config_fields, parse_value, variable_choices

# The module every process of the built-in worker runs: python -m worker (torchrun ... -m worker).
BUILT_IN_WORKER = "worker"
# The container command of the indexed-trainer launcher: torchrun's own, exiting with the worker's code.
LAUNCHER_COMMAND = ("python", "-m", "worker.launch")
# The init container's command: validate the variables, exit 0 or BAD_CONFIG.
CHECK_CONFIG_COMMAND = ("python", "-m", BUILT_IN_WORKER, "--check-config")
# Where the shared volume is mounted in the pod (the image's WORKDIR; DATA_DIR and OUTPUT_DIR live under it).
SHARED_MOUNT = "/pvc-home"

# Every variable the built-in worker reads, and those that take one of a few words (checked at render time,
# so that a typo fails gen-manifests, not a pod).
WORKER_VARIABLES = frozenset(item.metadata["env"] for item in config_fields())
WORKER_CHOICES = variable_choices()
# The variables a rendered ConfigMap shows with their defaults, so that a user sees (and edits) the run's
# hyper-parameters there; only for the built-in worker (another program's variables are its own).
SHOWN_DEFAULTS = ("EPOCHS", "BATCH_SIZE", "LEARNING_RATE")
# Why fp16 is refused without a GPU, worded once for the render-time check and the worker's own.
FP16_NEEDS_CUDA = "fp16 needs a CUDA GPU (its gradient scaler runs on CUDA only)"

# A GPU job's request, in every process's environment (rendered with the ConfigMap), so that the launcher can tell
# a pod that sees fewer GPUs than it asked for before the rendezvous: resources.gpu.accelerator_count, and
# resources.gpu.cpu_fallback (true: train on the CPU after one warning line; false: exit GPU_MISSING).
GPUS_VARIABLE = "INDEXED_TRAINER_GPUS"
CPU_FALLBACK_VARIABLE = "INDEXED_TRAINER_CPU_FALLBACK"
# The launcher's warnings start so: the status views (local-job status, run.sh --status) show them.
LAUNCHER_WARNING = "launcher: warning: "

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
RESERVED_PREFIXES = ("PET_", "TORCHELASTIC_", "INDEXED_TRAINER_")


def shown_defaults() -> dict[str, str]:
    """SHOWN_DEFAULTS with the worker's own defaults, as ConfigMap strings."""
    defaults = {item.metadata["env"]: item.default for item in config_fields()}
    return {name: str(defaults[name]) for name in SHOWN_DEFAULTS}


def variable_problem(name: str, text: str) -> str | None:
    """Why ``text`` is not a value the worker accepts for its variable ``name`` (its own check, so that a render
    refuses what the pod would: "must be at least 1"), or None."""
    item = next(item for item in config_fields() if item.metadata["env"] == name)
    try:
        parse_value(item, text)
    except ValueError as exc:
        return str(exc)
    return None


def gpu_request(gpus: int, cpu_fallback: bool) -> dict[str, str]:
    """The variables that carry a GPU job's request to the launcher (none for a CPU job)."""
    return {GPUS_VARIABLE: str(gpus), CPU_FALLBACK_VARIABLE: str(cpu_fallback).lower()} if gpus else {}


def reserved(name: str) -> bool:
    return name in RESERVED_VARIABLES or name.startswith(RESERVED_PREFIXES)


def signal_exit_code(signum: int) -> int:
    """A process killed by (or stopping on) signal ``signum``, as container runtimes and shells report it."""
    return 128 + signum


# SIGTERM's code is the one the exit codes name: a stop after the checkpoint.
assert signal_exit_code(signal.SIGTERM) == exit_codes.TERMINATED
