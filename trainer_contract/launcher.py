"""How a pod or a node starts the training, stated once for every target: the container commands, where the
shared volume is mounted, and the torchrun command line (each target renders ``torchrun_flags`` in its own
syntax: the Job's args list, the Slurm script's srun line).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainer_contract.storage import scrubbed

# The module every process of the built-in worker runs: python -m worker (torchrun ... -m worker).
BUILT_IN_WORKER = "worker"
# The container command of the indexed-trainer launcher: torchrun's own, exiting with the worker's code.
LAUNCHER_COMMAND = ("python", "-m", "worker.launch")


def check_config_command(module: str) -> tuple[str, ...]:
    """The init container's command for built-in program ``module``: validate its variables, exit 0 or
    BAD_CONFIG."""
    return ("python", "-m", module, "--check-config")


# The stager's command (trainer_stager/, torch-free): index 0 stages the model and dataset, the others wait.
STAGE_COMMAND = ("python", "-m", "worker.staging")
# Its flag naming the built-in program whose checkpoints it restores from checkpoint.storage_uri (its variables
# say where they are and how they are named); without it, the MNIST worker's.
STAGE_PROGRAM_FLAG = "--program"


def stage_command(restoring: str | None) -> tuple[str, ...]:
    """The stager's command; ``restoring``: the module of the built-in program whose checkpoints it restores from
    the bucket (None: it restores none)."""
    if restoring is None or restoring == BUILT_IN_WORKER:
        return STAGE_COMMAND
    return (*STAGE_COMMAND, STAGE_PROGRAM_FLAG, restoring)


# Where the shared volume is mounted in the pod (the image's WORKDIR; DATA_DIR and OUTPUT_DIR live under it).
SHARED_MOUNT = "/pvc-home"

# The launcher's warnings start so: the status views (local-job status, run.sh --status) show them.
LAUNCHER_WARNING = "launcher: warning: "

# Where the kubelet reads a container's termination message (the container's terminationMessagePath, a file
# it provides): `kubectl get pods` / `describe` then say why this pod ended, without its logs.
TERMINATION_MESSAGE = Path("/dev/termination-log")


def write_termination_message(message: str, path: Path = TERMINATION_MESSAGE) -> None:
    """Only where the kubelet provides the file: never create one in /dev of a machine or a plain container. The
    message is scrubbed (it may quote another library's error, which quotes a URL): kubectl shows it to anyone who
    may read the pod."""
    if path.is_file() and os.access(path, os.W_OK):
        try:
            path.write_text(scrubbed(message)[:4096] + "\n")  # the kubelet keeps at most 4096 bytes
        except OSError:
            pass


# What a flag is about; a target may lay the command line out by it (the Slurm script: one line per group,
# the node's rank inside each task's shell).
FlagGroup = Literal["gang", "node", "rendezvous", "timeouts"]


@dataclass(frozen=True)
class TorchrunFlag:
    name: str
    value: str
    group: FlagGroup
    why: str = ""  # a target that can comment beside an argument says this

    @property
    def text(self) -> str:
        return f"{self.name}={self.value}"


def torchrun_flags(*, nnodes: int, nproc_per_node: int, node_rank: str, master_addr: str, master_port: int,
                   join_timeout: int, shutdown_timeout: int) -> tuple[TorchrunFlag, ...]:
    """torchrun's flags for node ``node_rank`` of a static gang of ``nnodes`` (in the target's own spelling of
    the rank and the rendezvous address: "$(JOB_COMPLETION_INDEX)", "$SLURM_NODEID"). torchrun itself never
    restarts the workers: the Job or the Slurm script restarts the whole gang from its checkpoint."""
    return (
        TorchrunFlag("--nnodes", str(nnodes), "gang"),
        TorchrunFlag("--nproc-per-node", str(nproc_per_node), "gang"),
        TorchrunFlag("--node-rank", node_rank, "node"),
        TorchrunFlag("--master-addr", master_addr, "rendezvous"),
        TorchrunFlag("--master-port", str(master_port), "rendezvous"),
        TorchrunFlag("--max-restarts", "0", "rendezvous"),
        TorchrunFlag("--rdzv-conf", f"timeout={join_timeout}", "timeouts",
                     "wait this long for all pods to join; then fail instead of hanging"),
        TorchrunFlag("--shutdown-timeout", str(shutdown_timeout), "timeouts",
                     "after SIGTERM, give the workers this long to checkpoint before torchrun kills them"),
    )
