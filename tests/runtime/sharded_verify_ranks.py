"""Code run inside spawned gloo ranks by test_sharded_checkpoint's gang tests (module-level so that spawn can pickle
it): the ranks write one sharded checkpoint together, then verify it as a gang, whole and damaged, each noting which
files it hashed and what it concluded."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from trainer_contract.checkpoint_layout import CorruptCheckpoint
from trainer_runtime import process_group
from trainer_runtime.checkpoints import sharded

RECORD = {"step": 7, "world_size": 3}
DAMAGED = "__2_0.distcp"  # the 4th file in the manifest's order: rank 0's share (every 3rd) in a gang of 3


def run_rank(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    process_group.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    directory = Path(out)
    path = directory / "step-00000007.ckpt"
    hashed: list[str] = []
    digest = sharded.file_digest

    def counted(file: Path) -> str:
        hashed.append(file.name)
        return digest(file)

    sharded.file_digest = counted  # this rank's process only
    sharded.write_shards({"weight": torch.full((4,), float(rank))}, RECORD, path, rank)
    dist.barrier()  # rank 0 publishes (manifest, rename) after every rank's shards are in
    hashed.clear()  # rank 0's manifest: the write's hashing, not the verification's
    outcome: dict = {"record": sharded.verify(path, gang=True), "hashed": list(hashed)}
    dist.barrier()
    if rank == 0:
        (path / DAMAGED).write_bytes(b"\0" * 8)
    dist.barrier()
    try:
        sharded.verify(path, gang=True)
    except CorruptCheckpoint as error:
        outcome["damaged"] = str(error)
    dist.barrier()
    if rank == 1:
        (path / sharded.MANIFEST).unlink()
    dist.barrier()
    try:
        sharded.verify(path, gang=True)
    except CorruptCheckpoint as error:
        outcome["no manifest"] = str(error)
    (directory / f"outcome-{rank}.json").write_text(json.dumps(outcome))
    process_group.destroy_process_group()
