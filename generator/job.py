"""The job as every target sees it: validated values become one typed, target-neutral description, which each
renderer (kubernetes.py, slurm.py) maps to its own objects. What both targets mean by a
value is decided here once; how a target spells it (quantities, #SBATCH options, paths) is the renderer's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainer_contract import exit_codes, variables
from trainer_contract.launcher import BUILT_IN_WORKER

Launcher = Literal["indexed-trainer", "torchrun"]

# What a multi-node GPU job needs for a dead peer to end the step in bounded time: the NCCL watchdog aborts
# a timed-out collective and tears the process down (async error handling), and the heartbeat monitor kills a
# process whose watchdog itself hangs. In the environment, so config_map and env override them.
NCCL_DEFAULTS = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "300",
}


def environment_text(value: str | int | float | bool) -> str:
    """A values file's variable as the process reads it: YAML's true/false as true/false (not Python's True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class ExitCodes:
    """The worker's exit codes the targets' failure handling keys on (trainer_contract/exit_codes.py)."""

    bad_config: int = exit_codes.BAD_CONFIG  # fails the whole job: retrying cannot help
    peer_lost: int = exit_codes.PEER_LOST  # a victim: not counted, the peer's own failure is
    terminated: int = exit_codes.TERMINATED  # SIGTERM after the checkpoint: a free restart
    gpu_missing: int = exit_codes.GPU_MISSING  # fewer GPUs than asked for, without CPU fallback: fails the job

    @property
    def fail_job(self) -> tuple[int, ...]:
        """The codes that end the whole job at once: retrying cannot help."""
        return (self.bad_config, self.gpu_missing)


@dataclass(frozen=True)
class JobDescription:
    name: str
    replicas: int  # pods on Kubernetes, nodes on Slurm: torchrun's --nnodes
    procs_per_node: int  # torchrun's --nproc-per-node
    gpus: int  # per pod or node
    cpu_cores: float
    memory_gib: float
    master_port: int
    join_timeout_seconds: int
    max_restarts: int
    grace_seconds: int
    launcher: Launcher
    built_in_worker: bool
    program: tuple[str, ...]  # what torchrun runs: -m MODULE or SCRIPT, then the program's arguments
    environment: dict[str, str]  # every process's variables (config_map over the defaults shown), sorted
    exit_codes: ExitCodes = ExitCodes()

    @property
    def shutdown_timeout(self) -> int:
        """torchrun's wait between forwarding SIGTERM and killing the workers: inside the grace period, with a
        few seconds left for torchrun itself to exit."""
        return max(1, self.grace_seconds - 5)

    def placement(self, shared: str) -> dict[str, str]:
        """Where data and results go by default, under the location every node shares (config_map overrides)."""
        return {"DATA_DIR": f"{shared}/data", "OUTPUT_DIR": f"{shared}/runs/{self.name}"}


def entry_module(entry: dict) -> str | None:
    """The module the processes run: entrypoint.module, else the built-in worker unless a script is set."""
    if entry["module"] is not None:
        return entry["module"]
    return None if entry["script"] is not None else BUILT_IN_WORKER


def describe(values: dict) -> JobDescription:
    """The description of validated ``values``."""
    gpus = values["resources"]["gpu"]["accelerator_count"]
    entry = values["entrypoint"]
    module = entry_module(entry)
    built_in = module == BUILT_IN_WORKER
    # the built-in worker's hyper-parameters are shown with their defaults; another program gets none of them
    shown = variables.shown_defaults() if built_in else {}
    request = variables.gpu_request(gpus, values["resources"]["gpu"]["cpu_fallback"])
    environment = {**(NCCL_DEFAULTS if gpus else {}), **request, **shown, **values["config_map"]}
    environment = {key: environment_text(value) for key, value in environment.items()
                   if value is not None}  # null removes one
    return JobDescription(
        name=values["name"],
        replicas=values["replicas"],
        procs_per_node=values["local_device_count"] or gpus or 1,
        gpus=gpus,
        cpu_cores=values["resources"]["cpu"],
        memory_gib=values["resources"]["memory"],
        master_port=values["master_port"],
        join_timeout_seconds=values["join_timeout_seconds"],
        max_restarts=values["max_restarts"],
        grace_seconds=values["termination_grace_period_seconds"],
        launcher=entry["launcher"] or ("indexed-trainer" if built_in else "torchrun"),
        built_in_worker=built_in,
        program=tuple((["-m", module] if module is not None else [entry["script"]])
                      + entry["args"]),
        environment=dict(sorted(environment.items())),
    )
