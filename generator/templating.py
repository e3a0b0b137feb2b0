"""What every target renders with: the strict Jinja environment of templates/ and the rendered object."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from generator.errors import TemplateError
from generator.resources import templates_dir
from generator.yamlsafe import to_yaml, to_yaml_mapping, to_yaml_string


@dataclass(frozen=True)
class Manifest:
    """One rendered object: its kind, its file name under --output-dir (apply order first) and its YAML."""

    kind: str
    filename: str
    text: str


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja's own per-user cache of compiled templates (keyed by their source): compiling the templates is
    a good part of gen-manifests' start-up. Without a safe temporary directory, templates just compile."""
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


@lru_cache(maxsize=4)
def _environment(directory: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error, never an empty string
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["yaml"] = to_yaml
    env.filters["yaml_string"] = to_yaml_string
    env.filters["yaml_mapping"] = to_yaml_mapping
    env.filters["sh"] = shlex.quote  # the Slurm script: a value as one shell word, whatever it holds
    return env


def environment(directory: Path | None = None) -> jinja2.Environment:
    """The strict Jinja environment of templates/ (every target renders through it)."""
    return _environment(directory or templates_dir())


def render_template(env: jinja2.Environment, template_name: str, context: dict) -> str:
    try:
        return env.get_template(template_name).render(context)
    except jinja2.TemplateError as exc:
        raise TemplateError(f"templates/{template_name}: {exc}") from None
