"""Peak memory per rank of STRATEGY=fsdp against allreduce, on a model whose parameters, gradients and Adam
state dominate the process (a 4-layer 4096-wide MLP, 67 M parameters: 1 GiB of fp32 state under allreduce).

    torchrun --standalone --nproc-per-node 2 -m bench.strategy_memory --strategy fsdp

Each rank declares the model on the meta device (no memory), applies the strategy through trainer_runtime.strategies (the
worker's own code), then allocates and initialises what the rank holds: the whole model under allreduce, its
shards under fsdp (as FSDP users build large models, torchtitan among them; built whole first, the model alone
would set every rank's peak). It then takes a few Adam steps and reports
the growth of its peak resident memory over what it held before the model existed (the torch import, gloo), and
of its resident memory after the last step; rank 0 prints the largest of each as ``peak_growth_mib=P
resident_growth_mib=R state_mib=S``, S being the fp32 parameters + gradients + Adam
moments of the whole model.
"""

from __future__ import annotations

import argparse
import os
import resource

import torch
import torch.distributed as dist
from torch import nn

from trainer_runtime import process_group, strategies
from trainer_runtime.distenv import read_dist_env

WIDTH, LAYERS, BATCH = 4096, 4, 64


def resident_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build_mlp(strategy: str, env, device: torch.device | None = None) -> tuple[strategies.Strategy, float]:
    """The MLP under ``strategy`` with its Adam optimizer, each rank allocating only what it holds (on ``device``,
    the CPU by default); and the MiB of fp32 state of the whole model (weights, gradients, two moments)."""
    device = device or torch.device("cpu")
    torch.manual_seed(0)
    with torch.device("meta"):
        model = nn.Sequential(*[layer for _ in range(LAYERS) for layer in (nn.Linear(WIDTH, WIDTH), nn.ReLU())])
    state_mib = 4 * sum(p.numel() for p in model.parameters()) * 4 / 2**20
    parallel = strategies.build(strategy, model, env, device, "fp32")
    model.to_empty(device=device)
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()  # under fsdp: initialises this rank's shards only
    parallel.attach(torch.optim.Adam(parallel.module.parameters(), lr=1e-4))
    return parallel, state_mib


def train_steps(parallel, env, steps: int, device: torch.device | None = None) -> None:
    inputs = torch.randn(BATCH, WIDTH, device=device)
    for _ in range(steps):
        parallel.zero_grad()
        loss = parallel.model(inputs).square().sum()
        parallel.backward(loss, BATCH, BATCH * env.world_size, False)
        parallel.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", choices=("allreduce", "fsdp"), required=True)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    process_group.init_process_group("gloo")
    env = read_dist_env()
    before = max(resident_mib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    parallel, state_mib = build_mlp(args.strategy, env)
    train_steps(parallel, env, args.steps)
    growth = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before,
                           resident_mib() - before])
    dist.all_reduce(growth, op=dist.ReduceOp.MAX)
    if env.rank == 0:
        print(f"peak_growth_mib={growth[0].item():.1f} resident_growth_mib={growth[1].item():.1f} "
              f"state_mib={state_mib:.1f}", flush=True)
    process_group.destroy_process_group()


if __name__ == "__main__":
    main()
