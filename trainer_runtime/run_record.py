"""How every program refuses to go on with settings other than its run's record (a checkpoint's, a finished
run's): the wording, once. A changed setting is bad configuration (exit 78), named with its old and new value,
then the ways out. Torch-free: the launcher reads a finished run's record before any rendezvous."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer_contract.settings import config_fields, noted_settings, shaping_settings


def changed_setting(variable: str, what: str, recorded: Any, now: Any) -> str:
    """One line: ``variable`` of the run recorded as ``what`` (a checkpoint, the finished run) differs."""
    return f"{variable}: {what} was trained with {variable}={recorded}, now {now}"


def ways_out(output_dir: Path | str, *, put_back: str = "value(s)", kept: str = "") -> str:
    """The line after the refusals: what to put back, or how to start a new run (``kept``: what becomes of the
    old one, in parentheses)."""
    return (f"either put the old {put_back} back, or start a new run: another OUTPUT_DIR (now {output_dir}) or "
            f"RESUME=false{f' ({kept})' if kept else ''}")


def variable_of(config_class: type, key: str) -> str:
    """The environment variable of setting ``key``."""
    return next(item.metadata["env"] for item in config_fields(config_class) if item.name == key)


def shown(value: Any) -> str:
    """A recorded value as its variable is written (true, not True; earlier versions recorded "True")."""
    return str(value).lower() if isinstance(value, bool) or value in ("True", "False") else str(value)


def differs(recorded: Any, now: Any) -> bool:
    return str(recorded) != str(now)  # by text: earlier versions recorded str(value)


def recorded_value(value: Any) -> Any:
    """A setting as a record (a checkpoint's, summary.json's) keeps it: JSON's values, which safe_load's allow-list
    reads back: a path as text, a tuple (TRAIN_FILES' globs) as a list."""
    if isinstance(value, tuple):
        return list(value)
    return str(value) if isinstance(value, Path) else value


def changed_settings(recorded: dict[str, Any], now: dict[str, Any], config_class: type, what: str) -> list[str]:
    """One line per shaping setting (declared ``shaping`` in trainer_contract/program_settings.py) of ``recorded``
    (the run's record, as ``what`` names it) that differs from ``now``."""
    return [changed_setting(variable_of(config_class, key), what, shown(recorded[key]), shown(now[key]))
            for key in shaping_settings(config_class) if key in recorded and key in now
            and differs(recorded[key], now[key])]


def noted_differences(recorded: dict[str, Any], config: Any) -> str:
    """What a finished run's record (``recorded``) holds otherwise than ``config`` asks, of the settings a finished run
    is not redone for (declared ``noted``): said after "already complete", or "" where nothing differs."""
    config_class = type(config)
    differences = [f"{variable_of(config_class, key)}={shown(recorded[key])}" for key in noted_settings(config_class)
                   if key in recorded and differs(recorded[key], recorded_value(getattr(config, key)))]
    return (f"; it was trained with {', '.join(differences)}, not as asked now (a finished run is not redone for "
            f"{'these' if len(differences) > 1 else 'this'})") if differences else ""
