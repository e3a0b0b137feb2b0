"""What the transformer workloads check around their training (the shell itself is every program's:
trainer_runtime.run_shell): the pretrained model directory before anything loads, its loading options, the
libraries' quiet, and the checkpoint a start resumes from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer_contract import exit_codes
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.entry import attention_problem
from trainer_runtime.failures import Refusal
from trainer_runtime.pretrained import checkpoint_record, run_identity
from trainer_runtime.pretrained.export import RUN_FILES
from trainer_runtime.resume import take_up


def require_model(model_dir: Path) -> None:
    """MODEL_DIR holds a model every workload may load: its config and safetensors weights, which from_pretrained
    is then told to insist on (use_safetensors=True): a pickled pytorch_model.bin from a Hub or a bucket could run
    code when loaded, whatever torch's version."""
    if not (model_dir / "config.json").is_file():
        raise Refusal(exit_codes.BAD_CONFIG, [f"MODEL_DIR: {model_dir} holds no model (no config.json): set "
                                              "initializer.model.storage_uri, or MODEL_DIR to a save_pretrained "
                                              "directory"])
    if not any(model_dir.glob("*.safetensors")):
        raise Refusal(exit_codes.BAD_CONFIG, [
            f"MODEL_DIR: {model_dir} has no safetensors weights (a pickled pytorch_model.bin is not loaded: it "
            "could run code); convert the model with save_pretrained(safe_serialization=True)"])


def loading_options(attention: str) -> dict[str, Any]:
    """from_pretrained's keywords for every workload's model: safetensors only (see require_model), and
    ATTN_IMPLEMENTATION where it names one ("auto": transformers' own choice, sdpa where the model has it)."""
    problem = attention_problem(attention)  # the start refused it already; a caller of its own may not have
    if problem:
        raise Refusal(exit_codes.BAD_CONFIG, [problem])
    return {"use_safetensors": True, **({} if attention == "auto" else {"attn_implementation": attention})}


def quiet_transformers() -> None:
    """A bar per rank for loading or writing a few files says nothing; nor does the table of a checkpoint's
    unused or new weights, which the run says in a line of its own; nor a library's deprecation warning about
    another library's call (peft reading transformers' is_gradient_checkpointing), which no user can act on."""
    import warnings

    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    disable_progress_bars()
    warnings.filterwarnings("ignore", message=r".*is deprecated and will be removed in v\d", category=FutureWarning,
                            module=r"transformers\.")


def resume_from(config: Any, now: dict[str, Any], store: CheckpointStore, log: Callable[[str], None],
                is_rank0: bool, run_files: tuple[str, ...] = RUN_FILES) -> tuple[Path, dict] | None:
    """The newest checkpoint in the store that verifies when RESUME is on, with its record (every rank, in step: the
    gang verifies it); refused when it was made otherwise than ``now`` (trainer_runtime.resume; ``run_files``: what a
    RESUME=false start sets aside beside every run's entries)."""
    found = take_up(config, store, lambda: store.newest(lambda path: checkpoint_record.read_record(path, gang=True)),
                    lambda found: run_identity.changes(found[1], now, f"checkpoint {found[0].name}", config),
                    run_files, log, is_rank0)
    if found is None:
        return None
    path, recorded = found
    log(f"resuming from {path.name}")
    if recorded.get("world_size") != now["world_size"]:  # allowed: GLOBAL_BATCH_SIZE keeps each step's examples
        log(f"{path.name} was taken with {recorded.get('world_size')} processes, now {now['world_size']}: "
            f"GLOBAL_BATCH_SIZE={config.global_batch_size} keeps every step's examples, the accumulation changes")
    return found
