"""The MNIST worker's finished run on the volume, the settings a run keeps, and its export. Torch-free: the launcher
reads it before any rendezvous (``MnistRun``: trainer_runtime.finished_run).

A run ends with model.pt, then model.json (each written atomically, model.json last: its presence marks a finished
run) recording the whole configuration, as every checkpoint does (JSON values: ``recorded_config``). Resuming or
re-running with another value of a shaping setting (``shaping=True`` in trainer_contract/program_settings.py) would
silently continue into another schedule, other batches or other shards, so it is refused as bad configuration (exit
78), naming each key with its old and new value.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trainer_contract.atomic import atomic_write
from trainer_contract.program_settings import DATA_VARIABLE, TrainConfig
from trainer_runtime import run_record
from trainer_runtime.finished_run import NEW_RUN_KEEPS, FinishedRun, read_summary
from trainer_runtime.metrics_file import METRICS_FILE

MODEL_SUMMARY, MODEL_WEIGHTS = "model.json", "model.pt"
CARD = "README.md"
EXPORTED = (MODEL_WEIGHTS, MODEL_SUMMARY, METRICS_FILE)


def recorded_config(config: TrainConfig) -> dict[str, Any]:
    """The configuration as a checkpoint and model.json record it: numbers, booleans, null, paths as text."""
    return {key: run_record.recorded_value(value) for key, value in asdict(config).items()}


def changed_settings(recorded: dict[str, Any], config: TrainConfig, what: str) -> list[str]:
    """One problem line per shaping setting that differs from ``recorded``, then the ways out; [] if none."""
    problems = run_record.changed_settings(recorded, recorded_config(config), TrainConfig, what)
    if problems:
        problems.append(run_record.ways_out(config.output_dir, kept=NEW_RUN_KEEPS))
    return problems


class MnistRun(FinishedRun):
    """The built-in worker's finished run: model.pt, then model.json recording the whole configuration."""

    config: TrainConfig

    def summary(self) -> dict[str, Any] | None:
        summary = read_summary(self.output_dir() / MODEL_SUMMARY) if (self.output_dir() / MODEL_WEIGHTS).is_file() \
            else None
        if summary is None or not isinstance(summary.get("config"), dict) or \
                not isinstance(summary.get("accuracy"), (int, float)):
            return None  # none, or written by an older version after an empty rerun: train (resume) again to restore it
        return summary

    def problems(self, summary: dict[str, Any]) -> list[str]:
        return changed_settings(summary["config"], self.config, f"the finished run in {self.config.output_dir}")

    def achieved(self, summary: dict[str, Any]) -> str:
        return f"{summary.get('epochs')} epochs, test accuracy {summary['accuracy']:.4f}"

    def result_of(self, summary: dict[str, Any]) -> str:
        return f"test accuracy {summary['accuracy']:.4f} after {summary.get('epochs')} epochs"

    def directories(self) -> dict[str, Path]:
        return {DATA_VARIABLE: Path(self.config.data_dir), **super().directories()}

    def write_export(self, directory: Path) -> None:
        if self.config.export_dir is not None:
            write_export(self.config.output_dir, directory)


def model_card(summary: dict) -> str:
    accuracy = summary.get("accuracy")
    return "\n".join([
        f"# {summary.get('model', 'worker.mnist.model.MnistCNN')}",
        "",
        "Trained by indexed-trainer's built-in worker (python -m worker) on MNIST.",
        "",
        f"- test accuracy: {accuracy:.4f}" if isinstance(accuracy, float) else "- test accuracy: unknown",
        f"- epochs: {summary.get('epochs')}, world size: {summary.get('world_size')}, data: {summary.get('data')}",
        f"- finished: {summary.get('finished_at')}",
        "",
        "Load it with `worker.mnist.model.MnistCNN().load_state_dict(torch.load('model.pt', weights_only=True))`; "
        "`metrics.jsonl` holds one record per epoch and `model.json` the run's settings.",
        "",
    ])


def write_export(output_dir: Path, export_dir: Path) -> list[str]:
    """The export (EXPORT_DIR, which export.storage_uri uploads): the finished run's files of ``output_dir`` copied
    into ``export_dir`` with a model card; the names written. The launcher writes it too, for a run that finished
    before an export was asked for."""
    summary = json.loads((output_dir / MODEL_SUMMARY).read_text())
    written = []
    for name in EXPORTED:
        source = output_dir / name
        if source.is_file():
            atomic_write(export_dir / name, source.read_bytes())
            written.append(name)
    atomic_write(export_dir / CARD, model_card(summary).encode())
    return [*written, CARD]
