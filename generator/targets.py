"""The targets a job renders for, and which values keys each uses: declared once, in the schema (x-targets on
a key that means something on some targets only), not in a list kept by hand beside each renderer."""

from __future__ import annotations

from generator.resources import default_values, schema

# Each target and how messages name it.
TARGETS = {"kubernetes": "Kubernetes", "slurm": "Slurm"}


def keys_for_other_targets(target: str) -> list[str]:
    """The dotted keys the schema declares meaningful only on other targets (an object's keys one by one,
    so that a message names the key that was set)."""
    found: list[str] = []

    def walk(node: dict, prefix: str, excluded: bool) -> None:
        for name, child in node.get("properties", {}).items():
            inside = excluded or target not in child.get("x-targets", [target])
            if inside and "properties" in child:
                walk(child, f"{prefix}{name}.", True)
            elif inside:
                found.append(prefix + name)
            else:
                walk(child, f"{prefix}{name}.", False)

    walk(schema(), "", False)
    return found


def _lookup(values: dict, dotted: str):
    for part in dotted.split("."):
        values = values[part]
    return values


def ignored_keys(values: dict, target: str) -> list[str]:
    """The keys ``target`` does not use that are set to something other than their default."""
    defaults = default_values()
    return [key for key in keys_for_other_targets(target) if _lookup(values, key) != _lookup(defaults, key)]
