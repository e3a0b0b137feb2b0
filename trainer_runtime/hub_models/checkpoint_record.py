"""What a transformer run's checkpoint records of how it was made, and why a resume is refused: another model,
another tokenizer (each by a digest of its files), another shaping setting or another number of processes, one
line each naming the variable, as the MNIST worker refuses a changed hyper-parameter. Checkpoints are named by
the optimizer step (trainer_contract.checkpoint_layout's OPTIMIZER_STEP, ``step-XXXXXXXX.ckpt``: a file, or under
FSDP a directory of every rank's shards), each written under a temporary name and renamed into place when whole;
rank 0 keeps the newest few and offers each to the bucket's mirror (checkpoint.storage_uri); the newest that loads
is resumed."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_contract import checkpoint_layout as layout
from trainer_contract.atomic import TEMP_PREFIX
from trainer_contract.checkpoint_layout import remove  # a checkpoint: a file, or a sharded one's directory
from trainer_contract.digests import file_digest
from trainer_contract.variables import config_fields
from trainer_runtime import run_record

if TYPE_CHECKING:
    from trainer_stager.checkpoint_mirror import CheckpointMirror

RECORD_KEY = "indexed_trainer"
# A sharded checkpoint is a directory of torch.distributed.checkpoint's files, each rank's shards, and this file
# with everything but the tensors (Lightning's layout), the record among it.
SHARDED_RECORD_FILE = "meta.pt"
# Files of a model directory that belong to its tokenizer (their digest is the tokenizer's revision); every
# other file but the stager's marker and hidden files is the model's.
TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                             "vocab.json", "merges.txt", "added_tokens.json", "spiece.model", "tokenizer.model",
                             "sentencepiece.bpe.model", "chat_template.jinja"})


checkpoint_name = layout.step_checkpoint_name


def revision(directory: Path, tokenizer: bool) -> str:
    """A digest of the model's files (``tokenizer`` False) or of its tokenizer's: what a resume must find again."""
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith(".") and (path.name in TOKENIZER_FILES) == tokenizer:
            digest.update(f"{path.name} {file_digest(path)}\n".encode())
    return digest.hexdigest()[:16]


def record(config: Any, shaping: Iterable[str], world_size: int) -> dict[str, Any]:
    """``shaping``: the settings whose change makes a resumed run another run (schedule, batches, seed)."""
    return {"model_revision": revision(config.model_dir, False), "tokenizer_revision": revision(config.model_dir, True),
            "world_size": world_size, "config": {key: getattr(config, key) for key in shaping}}


def _env_name(config: Any, key: str) -> str:
    return next(item.metadata["env"] for item in config_fields(type(config)) if item.name == key)


def changes(recorded: dict[str, Any], now: dict[str, Any], name: str, config: Any) -> list[str]:
    """Why checkpoint ``name`` (recorded) cannot be resumed with ``now``: one line each, then the ways out."""
    problems = [f"MODEL_DIR: checkpoint {name} was trained from another {what} (revision {recorded[key]}, now "
                f"{now[key]} in {config.model_dir})"
                for key, what in (("model_revision", "model"), ("tokenizer_revision", "tokenizer"))
                if recorded.get(key) != now[key]]
    problems += [run_record.changed_setting(_env_name(config, key), f"checkpoint {name}", value, now["config"][key])
                 for key, value in recorded.get("config", {}).items()
                 if key in now["config"] and str(value) != str(now["config"][key])]
    if recorded.get("world_size") != now["world_size"]:
        problems.append(f"WORLD_SIZE: checkpoint {name} was taken with {recorded.get('world_size')} processes, now "
                        f"{now['world_size']}: each process's share of the epoch would change")
    if problems:
        problems.append(run_record.ways_out(config.output_dir, put_back="model or value(s)"))
    return problems


def newest(directory: Path, log: Callable[[str], None]) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads (a file, or a sharded checkpoint's directory), with its record; one that
    does not is named and passed over."""
    from trainer_runtime.checkpoints import safe_load

    for _, path in layout.list_checkpoints(directory, layout.OPTIMIZER_STEP):
        try:
            record_file = path / SHARDED_RECORD_FILE if path.is_dir() else path
            checkpoint = safe_load.load(record_file, name=path.name, mmap=True)
            return path, checkpoint[RECORD_KEY]
        except safe_load.UnsafeCheckpoint:
            raise  # refused, never passed over for an older one: someone wrote it
        except Exception as error:  # a damaged file: torch's errors share no base class  # noqa: BLE001
            log(f"checkpoint {path.name} cannot be read ({type(error).__name__}: {error}); trying an older one")
    return None


def published(path: Path, keep: int, mirror: CheckpointMirror | None) -> None:
    """Rank 0's part once checkpoint ``path`` is whole on the volume: keep the newest ``keep`` there, and offer it
    to the mirror (checkpoint.storage_uri), which uploads it beside the training and removes from the bucket what
    the volume no longer keeps."""
    layout.prune(path.parent, keep, layout.OPTIMIZER_STEP)
    if mirror is not None:
        mirror.offer(path)


def remove_temporaries(directory: Path) -> None:
    """What a write cut short left behind (the checkpoints themselves are whole or absent)."""
    for path in directory.glob(f"{TEMP_PREFIX}*"):
        remove(path)


def write(checkpoint: dict[str, Any], path: Path) -> None:
    """torch.save streamed into a temporary file renamed into place: readers (and a resume after a kill) see the
    previous checkpoint or the whole new one."""
    import torch

    from trainer_contract.atomic import atomic_write_with

    atomic_write_with(path, lambda handle: torch.save(checkpoint, handle))
