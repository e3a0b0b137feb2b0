"""A built-in program's configuration: environment variables (the Job's ConfigMap), overridden by command-line
flags.

The variables themselves (type, default, range, help) are the settings classes of
trainer_contract/program_settings.py, declared with trainer_contract/settings.py; this module reads them for the
programs, for their launcher and for the stager. Every value is checked in one place; all problems are reported
together, each
naming the variable or flag, and the process exits with exit_codes.BAD_CONFIG. This module does not import
torch, so the Job's check-config init container starts fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from trainer_contract.settings import ConfigError, config_fields, flag_name, parse_value


def build_parser(config_class: type, prog: str, what: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"{what} (under torchrun, or alone as one process). Every flag overrides the "
        "environment variable named in its help.",
    )
    for item in config_fields(config_class):
        parser.add_argument(flag_name(item), dest=item.name, default=None, metavar="VALUE",
                            # argparse expands %-formats in a help: a setting's "2%" must stay text
                            help=f"{item.metadata['help']} [env {item.metadata['env']}]".replace("%", "%%"))
    parser.add_argument("--check-config", action="store_true",
                        help="Validate the variables and flags (and, under torchrun, the ranks against JOB_COMPLETION_INDEX), then exit (0, or 78).")
    return parser


def load_config(environ: Mapping[str, str], flags: Mapping[str, str | None] | None = None, *,
                config_class: type) -> Any:
    """Read every setting of ``config_class`` from ``flags`` (if given there) else ``environ`` else its default."""
    flags = flags or {}
    values, problems = {}, []
    for item in config_fields(config_class):
        env_name = item.metadata["env"]
        flag = flags.get(item.name)
        if flag is not None:
            raw, source = flag, f"{flag_name(item)}"
        elif env_name in environ:
            raw, source = environ[env_name], f"{env_name}"
        else:
            continue
        try:
            values[item.name] = parse_value(item, raw)
        except ValueError as exc:
            problems.append(f"{source}: {raw!r} {exc}")
    if problems:
        raise ConfigError(problems)
    return config_class(**values)


NOTED = " A finished run is not redone for another value; its rerun says it was trained otherwise."


def config_reference(config_class: type) -> str:
    """A program's variables as a Markdown table (embedded in docs/; a test keeps them equal). A shaping setting
    says that a resume with another value is refused, a noted one what a finished run makes of another value."""
    lines = ["| variable | flag | default | meaning |", "| --- | --- | --- | --- |"]
    for item in config_fields(config_class):
        default = item.default
        shown = "(empty)" if default in (None, ()) else f"`{str(default).lower() if isinstance(default, bool) else default}`"
        meaning = item.metadata["help"] + (" A resume with another value is refused." if item.metadata.get("shaping")
                                           else NOTED if item.metadata.get("noted") else "")
        lines.append(f"| `{item.metadata['env']}` | `{flag_name(item)}` | {shown} | {meaning} |")
    return "\n".join(lines) + "\n"
