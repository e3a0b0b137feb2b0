"""The targets a job renders for, behind one interface, and the registry that holds them.

A target is its options (its own keys of the values, typed: ``options``), what it refuses (``option_problems``
in those options, reported whatever the target so that a values file stays valid for every one of them;
``problems`` in the job itself, reported when rendering for it), and ``render``: the spec in, manifests out.
The CLI and validation dispatch through ``TARGETS`` and name no target; a new one is a module that calls
``register``. Which keys a target uses is declared once, in the schema (``x-targets`` on a key that means
something on some targets only).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from generator.errors import ValuesError
from generator.resources import default_values, schema
from generator.spec import JobSpec, build_spec
from generator.templating import Manifest

# The modules of the built-in targets, imported (and so registered) on first use of the registry.
BUILT_IN = ("generator.targets.kubernetes", "generator.targets.slurm", "generator.targets.local")


class Target:
    """One place a job runs. Subclasses set ``name`` (the --target word) and ``title`` (how messages name it)."""

    name: ClassVar[str]
    title: ClassVar[str]

    def options(self, values: Mapping[str, Any]) -> Any:
        """This target's own keys of schema-valid ``values``, typed; None when it has none."""
        return None

    def option_problems(self, spec: JobSpec) -> Iterable[str]:
        """What is wrong with this target's own options, each naming its key; reported whatever the target."""
        return ()

    def problems(self, spec: JobSpec) -> Iterable[str]:
        """What cannot work when rendering ``spec`` for this target, each naming its key."""
        return ()

    def warnings(self, values: Mapping[str, Any], spec: JobSpec) -> Iterable[str]:
        """What renders but is likely not what the user meant here, each naming its key (said on stderr)."""
        return ()

    def render(self, spec: JobSpec) -> list[Manifest]:
        raise NotImplementedError

    def render_checked(self, spec: JobSpec) -> list[Manifest]:
        """``render``, after ``problems``: ValuesError naming each of them."""
        problems = list(self.problems(spec))
        if problems:
            raise ValuesError(*problems)
        return self.render(spec)

    def stream(self, manifests: list[Manifest]) -> str:
        """The render as one text for stdout."""
        return "".join(manifest.text for manifest in manifests)

    def own(self, spec: JobSpec) -> Any:
        """This target's options in ``spec``."""
        return spec.options[self.name]


_REGISTRY: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Add ``target`` to the registry (a target of the same name is replaced)."""
    _REGISTRY[target.name] = target
    return target


def targets() -> dict[str, Target]:
    """Every registered target, by name, the built-in ones first."""
    for module in BUILT_IN:
        importlib.import_module(module)
    return dict(_REGISTRY)


def spec_of(values: Mapping[str, Any]) -> JobSpec:
    """The JobSpec of schema-valid ``values``, with every target's options."""
    return build_spec(values, {name: target.options(values) for name, target in targets().items()})


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


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        values = values[part]
    return values


def ignored_keys(values: Mapping[str, Any], target: str) -> list[str]:
    """The keys ``target`` does not use that are set to something other than their default."""
    defaults = default_values()
    return [key for key in keys_for_other_targets(target) if _lookup(values, key) != _lookup(defaults, key)]
