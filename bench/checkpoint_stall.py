"""Checkpoint stall: how long one save blocks the training loop, synchronous against asynchronous (the same
process alternates the two), for the MNIST CNN and the 67 M-parameter MLP of bench.strategy_memory.

    torchrun --standalone --nproc-per-node 2 -m bench.checkpoint_stall --strategy fsdp --model mlp --repeats 3

Under allreduce rank 0 writes one file (the other ranks would wait for it in the next collective), under fsdp
every rank writes its shard: the stall is the longest any rank is blocked in CheckpointManager.save, the write
the time until the checkpoint is on disk. Each mode's manager lives for the whole run, as a training run's does;
its first save (which allocates the asynchronous copy's buffers) is not among the repeats. Written to
--directory (default: a new directory under the current one's filesystem, not a tmpfs). Rank 0 prints medians
as ``sync_blocked_s=A async_blocked_s=B sync_write_s=C async_write_s=D async_first_blocked_s=E``. ``--device
cuda``: each rank's model on its own GPU, the process group NCCL (bench/gpu.sh's); the CPU and gloo by default.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bench.strategy_memory import build_mlp, train_steps
from trainer_contract.checkpoint_layout import EPOCH_STEP, Position
from trainer_runtime import process_group, strategies
from trainer_runtime.checkpoints.manager import CheckpointManager
from trainer_runtime.checkpoints.state import TrainingState
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import read_dist_env
from worker.mnist.model import MnistCNN


def build_cnn(strategy: str, env, device: torch.device) -> strategies.Strategy:
    torch.manual_seed(0)
    parallel = strategies.build(strategy, MnistCNN().to(device), env, device, "fp32")
    parallel.attach(torch.optim.Adam(parallel.module.parameters(), lr=1e-3))
    parallel.zero_grad()
    loss = F.cross_entropy(parallel.model(torch.randn(8, 1, 28, 28, device=device)), torch.arange(8, device=device),
                           reduction="sum")
    parallel.backward(loss, 8, 8 * env.world_size, False)
    parallel.step()  # the optimizer's state exists, as in any checkpoint after the first epoch
    return parallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", choices=("allreduce", "fsdp"), required=True)
    parser.add_argument("--model", choices=("cnn", "mlp"), required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--directory", type=Path, default=Path.cwd())
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    env = read_dist_env()
    device = torch.device("cuda", env.local_rank) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        process_group.init_process_group("nccl", device_id=device)
    else:
        process_group.init_process_group("gloo")
    if args.model == "mlp":
        parallel, _ = build_mlp(args.strategy, env, device)
        train_steps(parallel, env, 1, device)
    else:
        parallel = build_cnn(args.strategy, env, device)
    box = [tempfile.mkdtemp(prefix="bench-checkpoints-", dir=args.directory) if env.rank == 0 else None]
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    root = Path(box[0])
    samples: dict[str, list[float]] = {"sync_blocked_s": [], "async_blocked_s": [], "sync_write_s": [],
                                       "async_write_s": [], "async_first_blocked_s": []}
    # One manager per mode for the whole run, as a training run keeps its own: an asynchronous save copies into
    # buffers it keeps, so only a run's first save pays for allocating them (reported apart: async_first_blocked_s).
    managers = {mode: CheckpointManager(CheckpointStore(root / mode, EPOCH_STEP, keep=1, log=lambda line: None),
                                        every=1, epochs=args.repeats, rank=env.rank,
                                        sharded_format=parallel.shards_parameters, asynchronous=mode == "async")
                for mode in ("sync", "async")}

    def save(mode: str, epoch: int) -> tuple[float, float]:
        """The longest any rank was blocked by one save, and the longest until it was on disk."""
        state = TrainingState(Position(epoch, 0), steps_per_epoch=1, world_size=env.world_size)
        dist.barrier()
        started = time.perf_counter()
        managers[mode].save(state, parallel)
        blocked = time.perf_counter() - started
        managers[mode].wait()
        written = time.perf_counter() - started
        dist.barrier()
        worst = torch.tensor([blocked, written], dtype=torch.float64, device=device)  # NCCL reduces on the GPU
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        return worst[0].item(), worst[1].item()

    samples["async_first_blocked_s"].append(save("async", 0)[0])
    save("sync", 0)
    for repeat in range(args.repeats):
        for mode in (("sync", "async") if repeat % 2 == 0 else ("async", "sync")):
            blocked, written = save(mode, repeat + 1)
            samples[f"{mode}_blocked_s"].append(blocked)
            samples[f"{mode}_write_s"].append(written)
    if env.rank == 0:
        print(" ".join(f"{key}={statistics.median(values):.4f}" for key, values in samples.items()), flush=True)
        shutil.rmtree(root, ignore_errors=True)
    process_group.destroy_process_group()


if __name__ == "__main__":
    main()
