"""Around a transformer run: refusals (a line each, then the exit code of the contract), the usage log beside
the training, the pretrained model directory checked before anything loads, and the checkpoint a start resumes
from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer_contract import exit_codes
from trainer_runtime.distenv import DistEnv
from trainer_runtime.hub_models import checkpoint_record
from trainer_runtime.hub_models.run_log import say
from trainer_runtime.stop import Terminated
from trainer_runtime.usage_log import UsageLog


class Refusal(Exception):
    def __init__(self, code: int, problems: list[str]):
        super().__init__("\n".join(problems))
        self.code, self.problems = code, problems


def run_logged(config: Any, env: DistEnv, train: Callable[[Any, DistEnv, Callable[[str], None]], int]) -> int:
    """``train(config, env, log)`` with every process's usage log running beside it; a Refusal becomes its lines
    and its exit code."""
    def log(message: str) -> None:
        say(env.rank, message)

    usage = UsageLog(config.output_dir / "logs" / f"usage-rank{env.rank}.log", f"rank {env.rank}",
                     every=config.usage_log_seconds).start()
    try:
        return train(config, env, log)
    except Refusal as refusal:
        for problem in refusal.problems:
            log(f"{'configuration error' if refusal.code == exit_codes.BAD_CONFIG else 'error'}: {problem}")
        log(f"exiting with code {refusal.code} ({exit_codes.meaning(refusal.code)})")
        return refusal.code
    except Terminated as terminated:  # during set-up (a StopRequest's), before anything worth saving
        log(f"stopped: {terminated} before training started; nothing to save")
        return exit_codes.TERMINATED
    finally:
        usage.stop()


def require_model(model_dir: Path) -> None:
    if not (model_dir / "config.json").is_file():
        raise Refusal(exit_codes.BAD_CONFIG, [f"MODEL_DIR: {model_dir} holds no model (no config.json): set "
                                              "initializer.model.storage_uri, or MODEL_DIR to a save_pretrained "
                                              "directory"])


def quiet_transformers() -> None:
    """A bar per rank for loading or writing a few files says nothing; nor does the table of a checkpoint's
    unused or new weights, which the run says in a line of its own."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    disable_progress_bars()


def resume_from(config: Any, now: dict[str, Any], log: Callable[[str], None]) -> tuple[Path, dict] | None:
    """The newest readable checkpoint in OUTPUT_DIR/checkpoints when RESUME is on, with its record; refused when
    it was made otherwise than ``now``."""
    directory = config.checkpoint_dir
    if directory.is_dir():
        checkpoint_record.remove_temporaries(directory)
    if not config.resume or not directory.is_dir():
        return None
    found = checkpoint_record.newest(directory, log)
    if found is None:
        return None
    path, recorded = found
    problems = checkpoint_record.changes(recorded, now, path.name, config)
    if problems:
        raise Refusal(exit_codes.BAD_CONFIG, problems)
    log(f"resuming from {path.name}")
    return found
