"""What the launcher may know of the program it runs: for a program that keeps its run on the shared volume (the
built-in programs), where that run lives, whether it is finished and with which settings, and its export.

The launcher itself knows no program. The program's entry registers its ``KeptRun`` factory here (worker/launch.py
registers the built-in programs': trainer_runtime.finished_run), so that a pod recreated after its gang finished
exits 0 at once instead of waiting for peers that will never come, a finished run with other settings is refused
before any rendezvous, and the gang's ledger lives beside the run. A program without a factory gets none of this
and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol


class KeptRun(Protocol):
    def directories(self) -> dict[str, Path]:
        """The directories the program writes, by the variable that names them (checked for writability)."""

    def output_dir(self) -> Path:
        """Where the run lives (the gang's ledger goes there)."""

    def resumes(self) -> bool:
        """Whether a start takes up the run found there (RESUME)."""

    def finished(self) -> bool:
        """Whether the run there is complete."""

    def summary(self) -> dict[str, Any] | None:
        """The finished run's summary (which names the replica group that wrote the model), or None."""

    def changed_settings(self) -> list[str]:
        """One line per setting in which the finished run differs from this start's (each a refusal)."""

    def describe_finished(self) -> str:
        """One line saying the run is complete and where its results are."""

    def result(self) -> str | None:
        """The finished run's result in a few words (the termination message's), or None."""

    def write_export(self, directory: Path) -> None:
        """Write the finished run's export into ``directory`` (where the program's settings ask for one)."""


# module run by torchrun (-m MODULE) -> the factory reading its settings (its flags; the environment)
_FACTORIES: dict[str, Callable[[Sequence[str]], KeptRun]] = {}


def register(module: str, factory: Callable[[Sequence[str]], KeptRun]) -> None:
    _FACTORIES[module] = factory


# module run by torchrun -> what it imports to train, which a warm worker has imported already
# (trainer_launcher/warm_workers.py)
_WARM_IMPORTS: dict[str, tuple[str, ...]] = {}


def register_warm_imports(module: str, imports: tuple[str, ...]) -> None:
    _WARM_IMPORTS[module] = imports


def warm_imports(module: str | None) -> tuple[str, ...] | None:
    """What ``module`` imports to train, for its warm workers; None: a program of its own (no stand-in)."""
    return _WARM_IMPORTS.get(module or "")


def kept_run(module: str | None, program_args: Sequence[str]) -> KeptRun | None:
    """The run ``module`` keeps (its settings read from ``program_args`` and the environment), or None. Raises
    trainer_contract.settings.ConfigError for malformed settings."""
    factory = _FACTORIES.get(module or "")
    return factory(program_args) if factory is not None else None
