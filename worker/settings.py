"""The settings that shape a run's math, and what to do when a resumed run asks for other ones.

A checkpoint and the final ``model.json`` record the whole configuration (as strings, see
``recorded_config``). Resuming or re-running with a different value of one of ``SHAPING`` would silently
continue into another schedule, other batches or other shards, so it is refused as bad configuration (exit
78), naming each key with its old and new value. This module does not import torch: the launcher checks a
finished run before any rendezvous.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

from worker.config import TrainConfig

# TrainConfig fields whose value changes the result of resuming: the schedule (EPOCHS, LEARNING_RATE),
# the batches (BATCH_SIZE, TRAIN_SAMPLES) and the shuffles and initialisation (SEED).
SHAPING = ("epochs", "batch_size", "learning_rate", "seed", "train_samples")
MODEL_SUMMARY = "model.json"
MODEL_WEIGHTS = "model.pt"


def env_name(field_name: str) -> str:
    return next(f.metadata["env"] for f in fields(TrainConfig) if f.name == field_name)


def recorded_config(config: TrainConfig) -> dict[str, str]:
    """The configuration as a checkpoint and model.json record it."""
    return {key: str(value) for key, value in asdict(config).items()}


def changed_settings(recorded: dict[str, str], config: TrainConfig, what: str) -> list[str]:
    """One problem line per shaping setting that differs from ``recorded``, then the ways out; [] if none."""
    now = recorded_config(config)
    problems = [f"{env_name(key)}: {what} was trained with {env_name(key)}={recorded[key]}, now {now[key]}"
                for key in SHAPING if key in recorded and recorded[key] != now[key]]
    if problems:
        problems.append(f"either put the old value(s) back, or start a new run: another OUTPUT_DIR (now "
                        f"{config.output_dir}) or RESUME=false")
    return problems


def finished_run(config: TrainConfig) -> dict | None:
    """The summary of the finished run in OUTPUT_DIR (model.json beside model.pt), or None.

    model.json is written last, after model.pt, each atomically: if it is there, the run is complete."""
    summary_path = config.output_dir / MODEL_SUMMARY
    if not (summary_path.is_file() and (config.output_dir / MODEL_WEIGHTS).is_file()):
        return None
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or not isinstance(summary.get("config"), dict) or summary.get("accuracy") is None:
        return None  # written by an older version after an empty rerun: train (resume) again to restore it
    return summary


def describe(summary: dict, output_dir: Path) -> str:
    accuracy = summary.get("accuracy")
    result = f"test accuracy {100 * accuracy:.2f}%" if accuracy is not None else "no test accuracy recorded"
    return (f"the run in {output_dir} is already complete ({summary.get('epochs')} epochs, {result}): nothing to "
            "do, no file changed; for a new run use another OUTPUT_DIR or RESUME=false")
