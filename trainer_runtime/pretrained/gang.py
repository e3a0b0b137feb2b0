"""A transformer workload's device and process group (finetune's and sft's; the QA workload's is Lightning's)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer_contract import exit_codes
from trainer_contract.settings import ConfigError
from trainer_runtime import precision, process_group
from trainer_runtime.distenv import DistEnv
from trainer_runtime.pretrained.run import Refusal
from trainer_runtime.threads import threads_per_process


def join(config: Any, env: DistEnv, log) -> torch.device:
    """This process's device, checked against PRECISION before any rendezvous, and the gang's process group."""
    torch.set_num_threads(threads_per_process(env.local_world_size, os.environ.get("OMP_NUM_THREADS")))
    cuda = torch.cuda.is_available() and env.local_rank < torch.cuda.device_count()
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    try:
        precision.require_supported(config.precision, device)
    except ConfigError as error:
        raise Refusal(exit_codes.BAD_CONFIG, error.problems) from None
    backend = "nccl" if cuda else "gloo"
    if env.world_size > 1:
        process_group.init_process_group(backend, timeout=timedelta(seconds=config.collective_timeout),
                                         device_id=device if cuda else None)
    else:  # DDP needs a process group, also of one process
        process_group.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    if env.is_rank0:
        log(f"process group: {backend}, world size {env.world_size} ({env.nodes} nodes x {env.local_world_size}), "
            f"{torch.get_num_threads()} threads each")
    return device
