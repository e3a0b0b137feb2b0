"""A transformer run's checkpoint and the record it holds of how the run was made (what that record says, and why
a resume is refused: trainer_runtime.pretrained.run_identity). The checkpoints themselves are the runtime's
(trainer_runtime.checkpoints): named by the optimizer step (checkpoint_layout's OPTIMIZER_STEP,
``step-XXXXXXXX.ckpt``), a verified file (single_file) or under FSDP a directory of every rank's shards with a
manifest (sharded), published, found and cleaned by the run's CheckpointStore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer_contract import checkpoint_layout as layout
from trainer_runtime.checkpoints import safe_load, sharded, single_file

RECORD_KEY = "indexed_trainer"  # the record's key in a checkpoint's state (a sharded one keeps it in its manifest)
# Before the workloads wrote through the runtime's formats, a sharded checkpoint was Lightning's own layout: DCP's
# files and this one with everything but the tensors, the record among it. Still read (a run resumes across the
# upgrade).
LEGACY_SHARDED_RECORD_FILE = "meta.pt"

checkpoint_name = layout.step_checkpoint_name


def read_record(path: Path, gang: bool = False) -> dict[str, Any]:
    """The record of checkpoint ``path``, verified (a file's hash, a directory's manifest of digests: the runtime's
    two formats) and read through safe_load's allow-lists; raises what a damaged or refused one raises. ``gang``:
    every rank reads the same ``path`` (a directory's shards are then hashed once per gang: sharded.verify)."""
    if path.is_file():  # kept: the resume that follows loads this payload without reading the file again
        return single_file.read_payload(path, keep=True)[RECORD_KEY]
    if (path / sharded.MANIFEST).is_file():
        return sharded.verify(path, gang)
    # a sharded checkpoint of an earlier version: Lightning's own layout, unverified, its record in this file
    return safe_load.load(path / LEGACY_SHARDED_RECORD_FILE, name=path.name, mmap=True)[RECORD_KEY]
