"""How a built-in program's settings are declared and read, stated once and without torch: a setting is a dataclass
field carrying its environment variable, its parser (type, range or choices), its help, its flag and whether a resume
may change it. trainer_contract/program_settings.py declares the programs' settings with it;
trainer_contract/config_reading.py reads them; the generator checks values against them at render time and
generates docs/worker.md's and docs/reference.md's tables from them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


class ConfigError(Exception):
    """One or more configuration problems, each a line naming its variable."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def parse_positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def parse_non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def parse_positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a positive number")
    return value


def parse_boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false (1/0, yes/no)")


def parse_url(text: str) -> str:
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https", "file") or not (parsed.netloc or parsed.scheme == "file"):
        raise ValueError("must be an http(s):// or file:// base URL")
    return text if text.endswith("/") else text + "/"


def parse_path(text: str) -> Path:
    if not text.strip():
        raise ValueError("must not be empty")
    return Path(text)


def parse_optional_path(text: str) -> Path | None:
    return Path(text) if text.strip() else None


def parse_name(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


def parse_non_negative_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be 0 or a positive number")
    return value


AUTO = "auto"


def parse_seconds_or_auto(text: str) -> float | str:
    """A number of seconds (0 or more), or AUTO: the program picks it."""
    return AUTO if text.strip().lower() == AUTO else parse_non_negative_float(text)


def parse_fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:  # also refuses nan
        raise ValueError("must be a fraction: 0 or more and below 1")
    return value


def parse_weights(text: str) -> tuple[float, ...]:
    """Comma-separated positive numbers (``3,1``, ``0.7,0.3``); empty: none."""
    parts = [part.strip() for part in text.split(",")] if text.strip() else []
    try:
        weights = tuple(parse_positive_float(part) for part in parts)
    except ValueError:
        raise ValueError("must be comma-separated positive numbers, one per glob (3,1)") from None
    return weights


def parse_file_patterns(text: str) -> tuple[str, ...]:
    """Comma-separated globs (``train/*.jsonl,extra.parquet``, ``**`` for any folders) relative to the data's folder,
    which none may leave: no absolute path, no ``..``; empty: none."""
    patterns = tuple(pattern.strip() for pattern in text.split(",") if pattern.strip())
    for pattern in patterns:
        if pattern.startswith(("/", "\\")) or ".." in pattern.replace("\\", "/").split("/"):
            named = f" ({pattern!r})" if len(patterns) > 1 else ""
            raise ValueError(f"leaves the data's folder{named}: give globs relative to it, without .. or a leading /")
    return patterns


def parse_optional_url(text: str) -> str | None:
    return parse_url(text) if text.strip() else None


class choice:  # noqa: N801 -- used like the parse functions beside it
    """Parses one of ``choices`` (any case); keeps them for the generated tables and the generator's check."""

    def __init__(self, *choices: str):
        self.choices = choices

    def __call__(self, text: str) -> str:
        value = text.strip().lower()
        if value not in self.choices:
            raise ValueError("must be one of " + ", ".join(self.choices))
        return value


def setting(env: str, parse: Callable[[str], object], default: object, help: str, flag: str | None = None,
            shaping: bool = False, noted: bool = False):
    """A dataclass field read from environment variable ``env`` or from ``--flag``. ``shaping``: a change makes a
    resumed run another run (its schedule, batches, examples or seed), so a resume with another value is refused
    (shaping_settings; the workloads' resume checks read it, no list of names elsewhere). ``noted``: a finished run
    is not redone for another value (its model is as good), but a rerun that asks for one is told, so that "already
    complete" does not read as "done the way you asked" (noted_settings)."""
    if shaping and noted:
        raise TypeError(f"{env}: a shaping setting refuses another value; it is not noted")
    return field(default=default, metadata={"env": env, "parse": parse, "help": help, "flag": flag,
                                            "shaping": shaping, "noted": noted})


_UNCHANGED: Any = object()


def changed(base: type, name: str, default: object = _UNCHANGED, help: str | None = None,
            parse: Callable[[str], object] | None = None):
    """Setting ``name`` of settings class ``base`` as a program redeclares it: the same variable, flag, shaping and noting,
    with the default, help or (narrower) choices the program changes (TRL's overridden defaults)."""
    declared = {item.name: item for item in dataclasses.fields(base)}.get(name)
    if declared is None:
        raise TypeError(f"{base.__name__} declares no setting {name!r}")
    metadata = {**declared.metadata, **({"help": help} if help is not None else {}),
                **({"parse": parse} if parse is not None else {})}
    return field(default=declared.default if default is _UNCHANGED else default, metadata=metadata)


def config_fields(config_class: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(config_class))


def variable_choices(config_class: type) -> dict[str, tuple[str, ...]]:
    """The variables that take one of a few words (STRATEGY, PRECISION), with their words."""
    return {item.metadata["env"]: item.metadata["parse"].choices for item in config_fields(config_class)
            if isinstance(item.metadata["parse"], choice)}


def flag_name(item: dataclasses.Field) -> str:
    return item.metadata["flag"] or "--" + item.name.replace("_", "-")


def parse_value(item: dataclasses.Field, raw: str) -> Any:
    """``raw`` as setting ``item``'s value; ValueError saying what the value must be."""
    try:
        return item.metadata["parse"](raw)
    except ValueError as exc:
        if str(exc).startswith(("invalid literal", "could not convert")):  # int() and float()'s own words
            raise ValueError("must be a number" if item.type in ("float", float) else "must be a whole number") from None
        raise


def shaping_settings(config_class: type) -> tuple[str, ...]:
    """The settings of ``config_class`` whose change refuses a resume (declared with ``shaping=True``), in order."""
    return tuple(item.name for item in config_fields(config_class) if item.metadata.get("shaping"))


def noted_settings(config_class: type) -> tuple[str, ...]:
    """The settings of ``config_class`` a finished run is not redone for but a rerun names (``noted=True``)."""
    return tuple(item.name for item in config_fields(config_class) if item.metadata.get("noted"))


def variable_problem(name: str, text: str, config_class: type) -> str | None:
    """Why ``text`` is not a value the program accepts for its variable ``name`` (its own check, so that a render
    refuses what the pod would: "must be at least 1"), or None."""
    item = next(item for item in config_fields(config_class) if item.metadata["env"] == name)
    try:
        parse_value(item, text)
    except ValueError as exc:
        return str(exc)
    return None
