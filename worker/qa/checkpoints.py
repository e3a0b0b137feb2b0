"""The question-answering run's checkpoints: Lightning's own (model, optimizer, schedule, loops, and the loader's
place in the epoch), written atomically (a kill mid-write leaves the previous checkpoint whole), named by the
optimizer step, and a record of what the run was made with. A resume with another model, another tokenizer or
another shaping setting is refused, naming each, as the MNIST worker refuses a changed hyper-parameter."""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins import TorchCheckpointIO

from trainer_contract import hooks
from trainer_contract.atomic import TEMP_PREFIX, atomic_write
from trainer_contract.variables import QaConfig, config_fields
from worker.digests import file_digest

RECORD_KEY = "indexed_trainer"
NAME = re.compile(r"^step-(\d{8})\.ckpt$")
# Files of a model directory that belong to its tokenizer (their digest is the tokenizer's revision); every
# other file but the stager's marker and hidden files is the model's.
TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                             "vocab.json", "merges.txt", "added_tokens.json", "spiece.model", "tokenizer.model",
                             "sentencepiece.bpe.model", "chat_template.jinja"})
# Settings whose change makes a resumed run another run: the schedule, the batches, the features, the seed.
SHAPING = ("epochs", "batch_size", "learning_rate", "seed", "train_samples", "max_seq_length", "doc_stride")


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.ckpt"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch.save, but into a temporary file renamed into place: readers (and a resume after a kill)
    see the previous checkpoint or the whole new one."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write(Path(path), buffer.getvalue())


class Checkpointing(L.Callback):
    """A checkpoint every ``every_steps`` optimizer steps (0: never mid-epoch) and at each epoch's end, after its
    evaluation; rank 0 keeps the newest ``keep``. Every rank calls Lightning's save (FSDP gathers the whole model
    for it); rank 0 writes the one file."""

    def __init__(self, directory: Path, every_steps: int, keep: int):
        self.directory, self.every_steps, self.keep = directory, every_steps, keep

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_index: int) -> None:
        last = batch_index + 1 == trainer.num_training_batches  # the epoch's end saves it, loops and all
        if self.every_steps and trainer.global_step % self.every_steps == 0 and not last:
            self.save(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.save(trainer)

    def save(self, trainer: L.Trainer) -> None:
        hooks.point("checkpoint")
        trainer.save_checkpoint(self.directory / checkpoint_name(trainer.global_step))
        if trainer.is_global_zero:
            for old in sorted(self.directory.glob("step-*.ckpt"), reverse=True)[self.keep:]:
                old.unlink(missing_ok=True)


def revision(directory: Path, tokenizer: bool) -> str:
    """A digest of the model's files (``tokenizer`` False) or of its tokenizer's: what a resume must find again."""
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith(".") and (path.name in TOKENIZER_FILES) == tokenizer:
            digest.update(f"{path.name} {file_digest(path)}\n".encode())
    return digest.hexdigest()[:16]


def record(config: QaConfig, world_size: int, model_revision: str, tokenizer_revision: str) -> dict[str, Any]:
    shaping = {key: getattr(config, key) for key in SHAPING}
    return {"model_revision": model_revision, "tokenizer_revision": tokenizer_revision, "world_size": world_size,
            "config": shaping}


def env_name(key: str) -> str:
    return next(item.metadata["env"] for item in config_fields(QaConfig) if item.name == key)


def changes(recorded: dict[str, Any], now: dict[str, Any], name: str, config: QaConfig) -> list[str]:
    """Why checkpoint ``name`` (recorded) cannot be resumed with ``now``: one line each, then the ways out."""
    problems = [f"MODEL_DIR: checkpoint {name} was trained from another {what} (revision {recorded[key]}, now "
                f"{now[key]} in {config.model_dir})"
                for key, what in (("model_revision", "model"), ("tokenizer_revision", "tokenizer"))
                if recorded.get(key) != now[key]]
    problems += [f"{env_name(key)}: checkpoint {name} was trained with {env_name(key)}={value}, now "
                 f"{now['config'][key]}" for key, value in recorded.get("config", {}).items()
                 if key in now["config"] and str(value) != str(now["config"][key])]
    if recorded.get("world_size") != now["world_size"]:
        problems.append(f"WORLD_SIZE: checkpoint {name} was taken with {recorded.get('world_size')} processes, now "
                        f"{now['world_size']}: each process's share of the epoch would change")
    if problems:
        problems.append(f"either put the old model or value(s) back, or start a new run: another OUTPUT_DIR (now "
                        f"{config.output_dir}) or RESUME=false")
    return problems


def newest(directory: Path, log: Callable[[str], None]) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads, with its record; one that does not is named and passed over."""
    found = sorted((path for path in directory.glob("step-*.ckpt") if NAME.match(path.name)), reverse=True)
    for path in found:
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
            return path, checkpoint[RECORD_KEY]
        except Exception as error:  # a damaged file: torch's errors share no base class  # noqa: BLE001
            log(f"checkpoint {path.name} cannot be read ({type(error).__name__}: {error}); trying an older one")
    return None


def remove_temporaries(directory: Path) -> None:
    """What a write cut short left behind (the checkpoints themselves are whole or absent)."""
    for path in directory.glob(f"{TEMP_PREFIX}*"):
        path.unlink(missing_ok=True)
