"""The values reference (every key, its default and meaning) as a Markdown table, built from the schema.

The README embeds this table; a test keeps the two equal. Regenerate it with:
    python -m generator.reference
"""

from __future__ import annotations

import json

from generator.resources import default_values
from generator.validation import load_schema


def _rows(schema: dict, defaults: dict, prefix: str = ""):
    for key, spec in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        default = defaults.get(key) if isinstance(defaults, dict) else None
        if "$ref" in spec:
            resolved = load_schema()["$defs"][spec["$ref"].rsplit("/", 1)[1]]
            spec = {**resolved, **{k: v for k, v in spec.items() if k != "$ref"}}
        if spec.get("type") == "object" and "properties" in spec:
            yield from _rows(spec, default or {}, f"{path}.")
            continue
        shown = json.dumps(default, ensure_ascii=False)
        description = spec.get("description", "").replace("|", "\\|")
        yield f"| `{path}` | `{shown}` | {description} |"


def values_reference() -> str:
    defaults = default_values()
    lines = ["| key | default | meaning |", "| --- | --- | --- |", *_rows(load_schema(), defaults)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(values_reference(), end="")
