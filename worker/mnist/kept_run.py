"""The built-in worker's run on the volume as its launcher sees it (trainer_launcher.programs.KeptRun): its
settings read as the worker reads them, the finished run in OUTPUT_DIR, its refusals and its export. Torch-free:
the launcher reads it before any rendezvous."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from trainer_contract.config_reading import build_parser, load_config
from trainer_contract.program_settings import DATA_VARIABLE, OUTPUT_VARIABLE, TrainConfig
from trainer_contract.settings import ConfigError
from worker.mnist import export, settings


class MnistRun:
    def __init__(self, config: TrainConfig):
        self.config = config

    @classmethod
    def from_args(cls, program_args: Sequence[str]) -> MnistRun:
        """The settings of ``python -m worker PROGRAM_ARGS`` (its flags, then the environment)."""
        try:
            flags = vars(build_parser(TrainConfig, "python -m worker", "Train the MNIST CNN").parse_known_args(list(program_args))[0])
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
        return settings.finished_run(self.config) is not None

    def changed_settings(self) -> list[str]:
        summary = settings.finished_run(self.config)
        if summary is None:
            return []
        return settings.changed_settings(summary["config"], self.config,
                                         f"the finished run in {self.config.output_dir}")

    def describe_finished(self) -> str:
        summary = settings.finished_run(self.config)
        assert summary is not None, "asked only of a finished run"
        return settings.describe(summary, self.config)

    def result(self) -> str | None:
        summary = settings.finished_run(self.config)
        if summary is None:
            return None
        return f"test accuracy {summary['accuracy']:.4f} after {summary.get('epochs')} epochs"

    def write_export(self, directory: Path) -> None:
        if self.config.export_dir is not None:
            export.write_export(self.config.output_dir, directory)
