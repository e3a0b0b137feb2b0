"""The MNIST worker's finished run on the volume, the settings a run keeps, and its export. Torch-free: the launcher
reads it before any rendezvous (``MnistRun``: trainer_launcher.programs.KeptRun).

A run ends with model.pt, then model.json (each written atomically, model.json last: its presence marks a finished
run) recording the whole configuration, as every checkpoint does (JSON values: ``recorded_config``). Resuming or
re-running with another value of a shaping setting (``shaping=True`` in trainer_contract/program_settings.py) would
silently continue into another schedule, other batches or other shards, so it is refused as bad configuration (exit
78), naming each key with its old and new value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trainer_contract.atomic import atomic_write
from trainer_contract.config_reading import build_parser, load_config
from trainer_contract.program_settings import DATA_VARIABLE, OUTPUT_VARIABLE, TrainConfig
from trainer_contract.settings import ConfigError
from trainer_runtime import run_record
from trainer_runtime.metrics_file import METRICS_FILE

MODEL_SUMMARY, MODEL_WEIGHTS = "model.json", "model.pt"
# Settings a finished run is not redone for (its model is as good), but that a rerun names when they differ:
# "already complete" must not read as "done the way you asked".
NOTED = ("strategy", "precision")
NEW_RUN_KEEPS = "the run there is kept in OUTPUT_DIR/previous-runs/"
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


def summary_of(output_dir: Path) -> dict | None:
    """The summary of the finished run in ``output_dir`` (model.json beside model.pt), or None."""
    try:
        summary = json.loads((output_dir / MODEL_SUMMARY).read_text()) if (output_dir / MODEL_WEIGHTS).is_file() else None
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or not isinstance(summary.get("config"), dict) or summary.get("accuracy") is None:
        return None  # none, or written by an older version after an empty rerun: train (resume) again to restore it
    return summary


def describe(summary: dict, config: TrainConfig) -> str:
    """The line of a rerun that finds its run complete, naming what it asked for differently."""
    recorded, now = summary["config"], recorded_config(config)
    differences = [f"{run_record.variable_of(TrainConfig, key)}={run_record.shown(recorded[key])}" for key in NOTED
                   if key in recorded and run_record.differs(recorded[key], now[key])]
    asked = (f"; it was trained with {', '.join(differences)}, not as asked now (a finished run is not redone "
             "for these)") if differences else ""
    return (f"the run in {config.output_dir} is already complete ({summary.get('epochs')} epochs, test accuracy "
            f"{summary['accuracy']:.4f}{asked}): nothing to do, no file changed; for a new run use another "
            f"OUTPUT_DIR or RESUME=false ({NEW_RUN_KEEPS})")


class MnistRun:
    """The built-in worker's run as its launcher sees it: its settings read as the worker reads them."""

    def __init__(self, config: TrainConfig):
        self.config = config

    @classmethod
    def from_args(cls, program_args: Sequence[str]) -> MnistRun:
        """The settings of ``python -m worker PROGRAM_ARGS`` (its flags, then the environment)."""
        try:
            parser = build_parser(TrainConfig, "python -m worker", "Train the MNIST CNN")
            flags = vars(parser.parse_known_args(list(program_args))[0])
        except SystemExit:  # a malformed flag: the worker reports it (78), naming it
            raise ConfigError(["malformed worker flags"]) from None
        return cls(load_config(os.environ, flags, config_class=TrainConfig))

    def directories(self) -> dict[str, Path]:
        return {DATA_VARIABLE: Path(self.config.data_dir), OUTPUT_VARIABLE: Path(self.config.output_dir)}

    def output_dir(self) -> Path:
        return Path(self.config.output_dir)

    def resumes(self) -> bool:
        return self.config.resume

    def finished(self) -> bool:
        return summary_of(self.output_dir()) is not None

    def changed_settings(self) -> list[str]:
        summary = summary_of(self.output_dir())
        return [] if summary is None else changed_settings(summary["config"], self.config,
                                                           f"the finished run in {self.config.output_dir}")

    def describe_finished(self) -> str:
        summary = summary_of(self.output_dir())
        assert summary is not None, "asked only of a finished run"
        return describe(summary, self.config)

    def result(self) -> str | None:
        summary = summary_of(self.output_dir())
        return None if summary is None else (f"test accuracy {summary['accuracy']:.4f} after {summary.get('epochs')} "
                                             "epochs")

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
