"""The distributed environment torchrun (and Kubernetes) give each process, read and checked without torch."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from trainer_contract.replica_groups import node_rank_of
from trainer_contract.settings import ConfigError


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    group_rank: int = 0  # the node (pod) rank
    restart_count: int = 0  # torchrun's local restart counter; a Kubernetes gang restart resets it
    job_index: int | None = None  # JOB_COMPLETION_INDEX: the pod's index in the Indexed Job
    under_launcher: bool = False  # started by torchrun (RANK and friends set)

    @property
    def is_rank0(self) -> bool:
        return self.rank == 0

    @property
    def nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def _optional_int(environ: Mapping[str, str], name: str, problems: list[str]) -> int | None:
    """The variable as a whole number of 0 or more; None when unset or empty (or wrong: then in ``problems``)."""
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        problems.append(f"{name}: {raw!r} must be a whole number")
        return None
    if value < 0:
        problems.append(f"{name}: {raw!r} must be 0 or more")
    return value


def _int(environ: Mapping[str, str], name: str, default: int, problems: list[str]) -> int:
    value = _optional_int(environ, name, problems)
    return default if value is None else value


def read_dist_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Read RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK and JOB_COMPLETION_INDEX.

    Without torchrun (no RANK) this is a single process: world size 1. Under the Job's static rendezvous
    the node rank must be the pod's completion index; a mismatch means the manifest was edited wrongly
    and ranks would collide, so it is a configuration error.
    """
    environ = os.environ if environ is None else environ
    problems: list[str] = []
    job_index = _optional_int(environ, "JOB_COMPLETION_INDEX", problems)
    if "RANK" not in environ:
        if problems:
            raise ConfigError(problems)
        return DistEnv(job_index=job_index, group_rank=job_index or 0)
    rank = _int(environ, "RANK", 0, problems)
    world = _int(environ, "WORLD_SIZE", 1, problems)
    local_rank = _int(environ, "LOCAL_RANK", 0, problems)
    local_world = _int(environ, "LOCAL_WORLD_SIZE", 1, problems)
    group_rank = _int(environ, "GROUP_RANK", 0, problems)
    restarts = _int(environ, "TORCHELASTIC_RESTART_COUNT", 0, problems)
    if not problems:
        if world < 1 or rank >= world:
            problems.append(f"RANK: {rank} must be below WORLD_SIZE ({world})")
        if local_world < 1 or local_rank >= local_world:
            problems.append(f"LOCAL_RANK: {local_rank} must be below LOCAL_WORLD_SIZE ({local_world})")
        if job_index is not None and group_rank != node_rank_of(environ, job_index):
            problems.append(
                f"GROUP_RANK: this pod is node {group_rank} of the rendezvous but JOB_COMPLETION_INDEX is "
                f"{job_index}; torchrun must run with --node-rank=$(JOB_COMPLETION_INDEX)"
            )
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not environ.get(name):
                problems.append(f"{name}: not set; start the worker with torchrun")
    if problems:
        raise ConfigError(problems)
    return DistEnv(rank, local_rank, world, local_world, group_rank, restarts, job_index, under_launcher=True)
