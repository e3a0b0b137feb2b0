"""The trained model as users load it: ``save_pretrained`` of the model and its tokenizer, written into a
temporary directory beside the destination and renamed into place (an export is whole or absent; a rerun's
replaces the previous one only once it is complete)."""

from __future__ import annotations

import errno
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from trainer_contract.atomic import TEMP_PREFIX, fsync_directory
from trainer_runtime import run_summary

TRAINED = "_trained"


def export_dir(config: Any, model_type: str, task: str) -> Path:
    """EXPORT_DIR when export.storage_uri set it, else <OUTPUT_DIR>/<model type>_<task>_trained (the seed's
    bert_squad_trained/)."""
    return config.export_dir or config.output_dir / f"{model_type}_{task}{TRAINED}"


def save_pretrained(model: Any, tokenizer: Any, destination: Path, state_dict: dict[str, Any] | None = None) -> None:
    """``state_dict``: the weights to write in place of the model's own (a sharded model's, gathered whole). Several
    writers at once (replica groups, each exporting the same weights) each write a directory of their own; one of
    theirs ends up in place, whole."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(destination)
    # a name of its own (not mkdtemp's: its 0700 would be the export's), the mode the umask gives, as save_pretrained's
    temporary = destination.parent / f"{TEMP_PREFIX}{destination.name}.{uuid.uuid4().hex}"
    temporary.mkdir()
    model.save_pretrained(temporary, state_dict=state_dict)
    tokenizer.save_pretrained(temporary)
    previous = temporary.with_name(f"{temporary.name}.previous")
    try:
        destination.rename(previous)
    except FileNotFoundError:
        pass  # none yet, or another writer's rename took it first
    try:
        temporary.rename(destination)
    except OSError as error:  # another writer's export took the place in between: it is whole, ours goes
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        shutil.rmtree(temporary, ignore_errors=True)
    shutil.rmtree(previous, ignore_errors=True)
    fsync_directory(destination.parent)


# An export's temporary this old is an abandoned one (its writer died): another writer's would be younger.
ABANDONED_AFTER_SECONDS = 3600.0


def _remove_abandoned(destination: Path) -> None:
    for stale in destination.parent.glob(f"{TEMP_PREFIX}{destination.name}.*"):
        try:
            abandoned = time.time() - stale.lstat().st_mtime > ABANDONED_AFTER_SECONDS
        except FileNotFoundError:
            continue
        if abandoned and stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


SUMMARY_FILE = "summary.json"
# What a pretrained-model run writes into OUTPUT_DIR beside every run's entries (a RESUME=false start sets them
# aside: trainer_runtime.previous_runs): its summary first, its default exports
RUN_FILES = (SUMMARY_FILE, f"*{TRAINED}")


def write_summary(output_dir: Path, summary: dict[str, Any], export: Any) -> None:
    """OUTPUT_DIR/summary.json, every pretrained-model program's: its final scores and run record, and what it
    exported (a directory, or several), by the one summary writer."""
    run_summary.write_summary(output_dir / SUMMARY_FILE, {**summary, "export": export})
