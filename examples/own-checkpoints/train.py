"""A user's own torchrun program whose checkpoints indexed-trainer keeps in a bucket, with nothing of indexed-trainer
in it: DDP on random data, a linear model (as examples/toy-ddp), and the checkpoint directory's convention:

- each checkpoint is one file in $INDEXED_TRAINER_CHECKPOINT_DIR, written under a name starting with "." and renamed
  into place when whole; the names sort by age (step-00000020.pt), and the program prunes old ones itself;
- at start, the newest one there is resumed from: its own, or on a new volume the one the stage step restored from
  the bucket. Index 0's launcher uploads each new one beside the training.

    torchrun --standalone --nproc-per-node=2 train.py 40 --save-every 10      # ./checkpoints without the variable

FAIL_AT_STEP=N (a test's stand-in for a cluster that is lost) makes every rank exit 78 at step N: the launcher passes
the code on, and the Job fails at once, leaving its volume and the bucket behind.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

DIRECTORY = os.environ.get("INDEXED_TRAINER_CHECKPOINT_DIR", "checkpoints")


def checkpoints() -> list[str]:
    """The whole checkpoints in DIRECTORY, oldest first (a name starting with "." is a write in progress)."""
    if not os.path.isdir(DIRECTORY):
        return []
    return sorted(name for name in os.listdir(DIRECTORY) if not name.startswith("."))


def save(step: int, model, optimizer, keep: int) -> None:
    os.makedirs(DIRECTORY, exist_ok=True)
    name = f"step-{step:08d}.pt"
    temporary = os.path.join(DIRECTORY, f".partial-{name}")
    with open(temporary, "wb") as handle:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, os.path.join(DIRECTORY, name))  # whole, or not there at all
    for old in checkpoints()[:-keep]:
        os.remove(os.path.join(DIRECTORY, old))
    print(f"step {step}: checkpoint {name} saved in {DIRECTORY}", flush=True)


def resume(model, optimizer, rank: int) -> int:
    """The step the newest checkpoint holds, its state loaded; 0 when there is none."""
    found = checkpoints()
    if not found:
        return 0
    state = torch.load(os.path.join(DIRECTORY, found[-1]), map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    print(f"[rank {rank}] resuming from {found[-1]} in {DIRECTORY}: step {state['step']}", flush=True)
    return state["step"]


def batch(step: int, rank: int, size: int):
    """This rank's random batch of ``step``: the same on a rerun, so a resumed run sees what it would have seen."""
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    inputs = torch.rand(size, 20, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True) / 20


def main(steps: int, save_every: int, keep: int, batch_size: int) -> None:
    import torch.distributed.nn  # noqa: F401 -- before the group exists (see examples/toy-ddp/train.py)

    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = resume(model, optimizer, rank)
    if start >= steps:
        print(f"[rank {rank}] already trained: {checkpoints()[-1]} holds {start} of {steps} steps; nothing to do",
              flush=True)
        dist.destroy_process_group()
        return
    ddp = DDP(model)
    fail_at = int(os.environ.get("FAIL_AT_STEP") or 0)
    for step in range(start + 1, steps + 1):
        if step == fail_at:
            print(f"[rank {rank}] FAIL_AT_STEP={fail_at}: exiting 78", flush=True)
            sys.exit(78)
        inputs, targets = batch(step, rank, batch_size)
        optimizer.zero_grad()
        loss = F.mse_loss(ddp(inputs), targets)
        loss.backward()
        optimizer.step()
        if rank == 0 and (step % save_every == 0 or step == steps):
            save(step, model, optimizer, keep)
    dist.barrier()  # the Job completes when index 0 does: every rank waits for rank 0's last checkpoint
    print(f"[rank {rank}] done: {steps} steps, last loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="DDP on random data, checkpoints by the directory convention")
    parser.add_argument("steps", type=int, help="optimizer steps in all")
    parser.add_argument("--save-every", type=int, default=10, help="checkpoint every N steps (and after the last)")
    parser.add_argument("--keep", type=int, default=2, help="checkpoints kept in the directory")
    parser.add_argument("--batch-size", type=int, default=32, help="examples per rank and step")
    arguments = parser.parse_args()
    main(arguments.steps, arguments.save_every, arguments.keep, arguments.batch_size)
