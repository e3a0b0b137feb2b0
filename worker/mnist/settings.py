"""The settings that shape a run's math, and what to do when a resumed run asks for other ones.

A checkpoint and the final ``model.json`` record the whole configuration (JSON values, see
``recorded_config``; earlier versions recorded strings, compared here by their text). Resuming or re-running with
a different value of a shaping setting (``shaping=True`` in trainer_contract/program_settings.py) would silently continue
into another schedule, other batches or other shards, so it is refused as bad configuration (exit 78), naming each
key with its old and new value. This module does not import torch: the launcher checks a
finished run before any rendezvous.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from trainer_contract.program_settings import TrainConfig
from trainer_runtime import run_record

# Settings a finished run is not redone for (its model is as good), but that a rerun names when they differ:
# "already complete" must not read as "done the way you asked".
NOTED = ("strategy", "precision")
MODEL_SUMMARY = "model.json"
MODEL_WEIGHTS = "model.pt"


def recorded_config(config: TrainConfig) -> dict[str, Any]:
    """The configuration as a checkpoint and model.json record it: numbers, booleans, null, paths as text."""
    return {key: run_record.recorded_value(value) for key, value in asdict(config).items()}


def changed_settings(recorded: dict[str, Any], config: TrainConfig, what: str) -> list[str]:
    """One problem line per shaping setting that differs from ``recorded``, then the ways out; [] if none."""
    problems = run_record.changed_settings(recorded, recorded_config(config), TrainConfig, what)
    if problems:
        problems.append(run_record.ways_out(config.output_dir, kept=NEW_RUN_KEEPS))
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


NEW_RUN_KEEPS = "the run there is kept in OUTPUT_DIR/previous-runs/"


def describe(summary: dict, config: TrainConfig) -> str:
    """The line of a rerun that finds its run complete, naming what it asked for differently."""
    accuracy = summary.get("accuracy")
    result = f"test accuracy {accuracy:.4f}" if accuracy is not None else "no test accuracy recorded"
    recorded, now = summary.get("config") or {}, recorded_config(config)
    differences = [f"{run_record.variable_of(TrainConfig, key)}={run_record.shown(recorded[key])}" for key in NOTED
                   if key in recorded and run_record.differs(recorded[key], now[key])]
    asked = (f"; it was trained with {', '.join(differences)}, not as asked now (a finished run is not redone "
             "for these)") if differences else ""
    return (f"the run in {config.output_dir} is already complete ({summary.get('epochs')} epochs, {result}{asked}): "
            f"nothing to do, no file changed; for a new run use another OUTPUT_DIR or RESUME=false ({NEW_RUN_KEEPS})")
