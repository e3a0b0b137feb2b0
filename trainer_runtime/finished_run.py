"""A built-in program's finished run on the volume, as the launcher sees it before any rendezvous
(trainer_launcher.programs.KeptRun) and as every program's own start does (trainer_runtime.run_shell): where the run
lives, whether it is complete and made with this start's settings, its result in a few words, its export. A pod
recreated after its gang finished then exits 0 at once instead of waiting for peers that will never come, and a
SIGTERM after the run completed ends the pod as a success.

Each program says what its finished run is (``summary``: the file it writes last, read back or None), how it differs
from this start (``problems``) and what it achieved; the rest is here, once. Torch-free."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainer_contract.config_reading import build_parser, load_config
from trainer_contract.program_settings import OUTPUT_VARIABLE, PROGRAMS, BuiltInProgram
from trainer_contract.settings import ConfigError
from trainer_contract.volume_notes import read_json_note
from trainer_runtime import run_record

# What a RESUME=false start does with the finished run it finds (trainer_runtime.previous_runs)
NEW_RUN_KEEPS = "the run there is kept in OUTPUT_DIR/previous-runs/"
# A run's summary is a few kilobytes: a larger file where it should be is not one
SUMMARY_LIMIT = 1 << 20


def read_summary(path: Path) -> dict[str, Any] | None:
    """The JSON object a program wrote last at ``path``, read as data from the shared volume (a regular file, bounded:
    trainer_contract.volume_notes), or None."""
    return read_json_note(path, SUMMARY_LIMIT)


def reader_of(program: BuiltInProgram) -> type[FinishedRun]:
    """The class that reads ``program``'s finished run (its ``finished_run``, "module:Class")."""
    module, name = program.finished_run.split(":")
    return getattr(importlib.import_module(module), name)


def finished_run_of(config: Any) -> FinishedRun | None:
    """The finished run of the built-in program whose settings ``config`` holds; None for anything else."""
    program = next((program for program in PROGRAMS if program.config is type(config)), None)
    return None if program is None else reader_of(program)(config)


def is_finished(config: Any) -> bool:
    """Whether the built-in program's run that ``config`` names is complete (one read of its summary)."""
    finished = finished_run_of(config)
    return finished is not None and finished.finished()


class FinishedRun:
    """The run ``config`` names (its OUTPUT_DIR), for a program's start and for its launcher."""

    def __init__(self, config: Any):
        self.config = config

    @classmethod
    def reading(cls, module: str) -> Callable[[Sequence[str]], FinishedRun]:
        """The launcher's factory for ``python -m MODULE PROGRAM_ARGS``: the settings read as the program reads them
        (its flags, then the environment); ConfigError where they are malformed (the program says which)."""
        program = next(program for program in PROGRAMS if program.module == module)

        def read(program_args: Sequence[str]) -> FinishedRun:
            try:
                parser = build_parser(program.config, f"python -m {module}", program.what)
                flags = vars(parser.parse_known_args(list(program_args))[0])
            except SystemExit:  # a malformed flag: the program reports it (78), naming it
                raise ConfigError([f"malformed {module} flags"]) from None
            return cls(load_config(os.environ, flags, config_class=program.config))

        return read

    # -- what each program says of its run ------------------------------------------------------------------------
    def summary(self) -> dict[str, Any] | None:
        """The finished run's summary in OUTPUT_DIR, or None where there is no finished run."""
        raise NotImplementedError

    def problems(self, summary: dict[str, Any]) -> list[str]:
        """One line per way in which the finished run was made otherwise than this start asks, then the ways out."""
        raise NotImplementedError

    def achieved(self, summary: dict[str, Any]) -> str:
        """What the run did, in a few words ("2 epochs, test accuracy 0.9800")."""
        raise NotImplementedError

    def result_of(self, summary: dict[str, Any]) -> str:
        """The result for the pod's termination message ("test accuracy 0.9800 after 2 epochs")."""
        raise NotImplementedError

    def noted(self, summary: dict[str, Any]) -> str:
        """What this start asks differently that a finished run is not redone for (the settings declared ``noted``,
        as the summary's "config" records them; said after ``achieved``)."""
        recorded = summary.get("config")
        return run_record.noted_differences(recorded, self.config) if isinstance(recorded, dict) else ""

    def write_export(self, directory: Path) -> None:
        """The finished run's export written into ``directory`` (EXPORT_DIR asked for after the run finished)."""
        raise NotImplementedError

    # -- the same for every program ------------------------------------------------------------------------------
    def directories(self) -> dict[str, Path]:
        """The directories the program writes, by the variable that names them (the launcher checks them)."""
        return {OUTPUT_VARIABLE: self.output_dir()}

    def output_dir(self) -> Path:
        return Path(self.config.output_dir)

    def resumes(self) -> bool:
        return bool(self.config.resume)

    # The summary is read anew at each question, never kept: the launcher asks again when a SIGTERM comes, and by then
    # the program may have finished the run.
    def finished(self) -> bool:
        return self.summary() is not None

    def changed_settings(self) -> list[str]:
        summary = self.summary()
        return [] if summary is None else self.problems(summary)

    def describe_finished(self) -> str:
        """The line of a start that finds its run complete, naming what it asked for differently."""
        summary = self.summary()
        assert summary is not None, "asked only of a finished run"
        return (f"the run in {self.output_dir()} is already complete ({self.achieved(summary)}{self.noted(summary)}): "
                f"nothing to do, no file changed; for a new run use another OUTPUT_DIR or RESUME=false "
                f"({NEW_RUN_KEEPS})")

    def result(self) -> str | None:
        summary = self.summary()
        return None if summary is None else self.result_of(summary)
