"""The values reference (every key, its default, the targets it means something on and its meaning) as a Markdown
table, built from the schema (a key's targets: its x-targets, else its parent's, else every target).

docs/reference.md embeds this table; a test keeps the two equal. Regenerate it with:
    python -m generator.reference
"""

from __future__ import annotations

import json

from generator.resources import default_values
from generator.validation import load_schema

# how the table names the targets a key means something on (local: local-job, which runs the Kubernetes render)
TARGET_WORDS = {("kubernetes", "local", "slurm"): "all", ("kubernetes", "local"): "Kubernetes, local-job",
                ("kubernetes",): "Kubernetes", ("slurm",): "Slurm"}
EVERY_TARGET = ("kubernetes", "local", "slurm")


def _rows(schema: dict, defaults: dict, prefix: str = "", targets: tuple[str, ...] = EVERY_TARGET):
    for key, spec in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        default = defaults.get(key) if isinstance(defaults, dict) else None
        if "$ref" in spec:
            resolved = load_schema()["$defs"][spec["$ref"].rsplit("/", 1)[1]]
            spec = {**resolved, **{k: v for k, v in spec.items() if k != "$ref"}}
        own = tuple(sorted(spec.get("x-targets", targets)))
        if spec.get("type") == "object" and "properties" in spec:
            yield from _rows(spec, default or {}, f"{path}.", own)
            continue
        shown = json.dumps(default, ensure_ascii=False)
        description = spec.get("description", "").replace("|", "\\|")
        yield f"| `{path}` | `{shown}` | {TARGET_WORDS[own]} | {description} |"


def values_reference() -> str:
    defaults = default_values()
    lines = ["| key | default | targets | meaning |", "| --- | --- | --- | --- |", *_rows(load_schema(), defaults)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(values_reference(), end="")
