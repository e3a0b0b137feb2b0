"""How every built-in program in plain PyTorch joins its gang (the MNIST worker, worker.finetune, worker.sft; the QA
workload's is Lightning's): this process's threads and device, PRECISION checked against the device before any
rendezvous (so that every rank exits 78 alike), and the process group."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer_contract import gang_ledger, hooks
from trainer_runtime import precision, process_group
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import Refusal
from trainer_runtime.threads import threads_per_process


@dataclass(frozen=True)
class Gang:
    device: torch.device
    store: Any  # the rendezvous' store (a process group of several); None alone


def join(config: Any, env: DistEnv, log, group_of_one: bool = True) -> Gang:
    """This process's device and the gang's process group; ``config``'s precision and collective_timeout.
    ``group_of_one``: a process alone gets a process group of one too (DDP and FSDP need one); its store is then
    no rendezvous'. A precision the device cannot run raises trainer_contract.settings.ConfigError (78)."""
    torch.set_num_threads(threads_per_process(env.local_world_size, os.environ.get("OMP_NUM_THREADS")))
    cuda = torch.cuda.is_available() and env.local_rank < torch.cuda.device_count()
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    precision.require_supported(config.precision, device)
    hooks.point("start", rank=env.rank, output_dir=config.output_dir, under_launcher=env.under_launcher, log=log)
    backend = "nccl" if cuda else "gloo"
    store = None
    if env.world_size > 1:
        timeout = timedelta(seconds=config.collective_timeout)
        bound = {"device_id": device if cuda else None}
        if not process_group.init_round_group(backend, env.nodes, env.rank, env.world_size, timeout, **bound):
            process_group.init_process_group(backend, timeout=timeout, **bound)
        store = dist.distributed_c10d._get_default_store()
    elif group_of_one:
        process_group.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    else:
        return Gang(device, None)
    if env.is_rank0:
        log(f"process group: {backend}, world size {env.world_size} ({env.nodes} nodes x {env.local_world_size}), "
            f"{torch.get_num_threads()} threads each")
    return Gang(device, store)


def record_attempt(env: DistEnv, output_dir) -> None:
    """Under the indexed-trainer launcher: each node's local rank 0 records which launcher its node is in this
    attempt (trainer_contract.gang_ledger: a note per node, none that grows with the gang, no collective), so that
    the launcher of index 0 knows a pod that vanished without waiting. Called once the process group is up."""
    token = os.environ.get(gang_ledger.TOKEN_VARIABLE)
    if token is None or not env.under_launcher or env.local_rank != 0:
        return
    gang_ledger.record_attempt(gang_ledger.notes_root(output_dir), {env.group_rank: token})


def from_rank0(env: DistEnv, compute: Callable[[], Any]) -> Any:
    """``compute()`` on rank 0 alone, its result given to every rank: what a start finds on the volume, and the
    transformer workloads' record (digests of a model on the volume: 15 GB for a 7B model), read once rather than
    once per process. A Refusal there is every rank's (each exits with its code, none as a victim); a rank 0 that
    fails otherwise ends the collective: the others exit as its victims."""
    try:
        box: list[Any] = [compute() if env.is_rank0 else None]
    except Refusal as refusal:
        if env.world_size == 1:
            raise
        box = [_Refused(refusal.code, refusal.problems)]
    if env.world_size > 1:
        dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], _Refused):
        raise Refusal(box[0].code, box[0].problems)
    return box[0]


@dataclass(frozen=True)
class _Refused:
    """A Refusal as the broadcast carries it (plain data: an exception's own pickling is not its constructor's)."""

    code: int
    problems: list[str]
