"""Validate resolved values: the JSON Schema, and the rules a schema cannot express.

Every problem of a file is reported at once (not one more per try), each as ``key.path: what is wrong``.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from generator import kubernetes, slurm
from generator.errors import ValuesError
from generator.job import entry_module, environment_text
from generator.names import pod_hostname
from generator.resources import default_values, schema
from generator.values import describe_value, type_name
from worker.contract import (
    BUILT_IN_WORKER,
    FP16_NEEDS_CUDA,
    RUNTIME_PREFIXES,
    WORKER_CHOICES,
    WORKER_VARIABLES,
    reserved,
    variable_problem,
)

MAX_HOSTNAME = 63  # a pod's hostname, <job>-<index>, is a DNS-1123 label
# Volumes and mount paths of the Job itself (templates/kubernetes/job.yaml.j2): extra_volumes may not take them.

_SURROGATE = re.compile("[\ud800-\udfff]")


@lru_cache(maxsize=1)
def load_schema(path: Path | None = None) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path else schema()


def closest(word: str, options: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The option ``word`` most likely meant, also in another case (``epochs`` -> ``EPOCHS``), or None."""
    options = list(options)
    by_folded = {option.casefold(): option for option in options}
    if word.casefold() in by_folded:
        return by_folded[word.casefold()]
    close = difflib.get_close_matches(word, options, n=1, cutoff=cutoff)
    if close:
        return close[0]
    # in another case only when very close: folding makes unrelated words look alike (hostPath, mount_path)
    close = difflib.get_close_matches(word.casefold(), list(by_folded), n=1, cutoff=max(cutoff, 0.75))
    return by_folded[close[0]] if close else None


def format_path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _schema_messages(error) -> list[str]:
    """Turn one jsonschema error into ``path: message`` lines worded for a person editing a values file."""
    path = list(error.absolute_path)
    validator, value, schema = error.validator, error.instance, error.schema
    where = format_path(path)
    if validator == "additionalProperties" and isinstance(value, dict):
        allowed = sorted(schema.get("properties", {}))
        lines = []
        for key in sorted(set(value) - set(allowed)):
            close = closest(key, allowed)
            hint = f"did you mean {close!r}?" if close else "allowed: " + ", ".join(allowed)
            lines.append(f"{format_path(path + [key])}: unknown key ({hint})")
        return lines
    if "propertyNames" in error.absolute_schema_path:
        # the key itself is wrong: name it, not the mapping that holds it
        reason = schema.get("x-pattern-hint", error.message) if validator == "pattern" else error.message
        return [f"{format_path(path + [value])}: invalid key name: {reason}"]
    if validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        hint, unit = "", schema.get("x-unit")
        if unit:
            expected = f"{expected} (in {unit})"
            amount = quantity_in(unit, value) if isinstance(value, str) else None
            if amount is not None:
                hint = f"; write {amount:g} for {value}"
        return [f"{where}: must be {expected}, not {type_name(value)} ({describe_value(value)}){hint}"]
    if validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [f"{format_path(path + [missing])}: is required"]
    if validator == "enum":
        options = ", ".join(json.dumps(option) for option in error.validator_value)
        return [f"{where}: {describe_value(value)} is not one of {options}"]
    if validator == "pattern":
        hint = schema.get("x-pattern-hint") or f"must match {error.validator_value}"
        return [f"{where}: {describe_value(value)} {hint}"]
    if validator in _BOUND_WORDS:
        return [f"{where}: {describe_value(value)} must be {_BOUND_WORDS[validator]} {error.validator_value}"]
    if validator in ("minLength", "maxLength"):
        words = "at least" if validator == "minLength" else "at most"
        return [f"{where}: must be {words} {error.validator_value} characters long, not {len(value)}"]
    if validator == "anyOf":
        # nullable names: report the non-null branch's complaint, which is what the user meant
        reasons = [line.partition(": ")[2] for sub in error.context if sub.validator != "type" for line in _schema_messages(sub)]
        return [f"{where}: must be null or a name: " + "; ".join(reasons or ["wrong type"])]
    if validator == "uniqueItems":
        return [f"{where}: has duplicate entries"]
    return [f"{where}: {error.message}"]


# Kubernetes quantity suffixes, in the unit a values file uses for each ("4Gi" -> 4 GiB, "500m" -> 0.5 cores)
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P|m)?\s*$")
_UNIT_FACTORS: dict[str, dict[str | None, float]] = {
    "GiB": {"Ki": 2.0 ** -20, "Mi": 2.0 ** -10, "Gi": 1.0, "Ti": 2.0 ** 10, "Pi": 2.0 ** 20,
            "k": 1e3 / 2 ** 30, "K": 1e3 / 2 ** 30, "M": 1e6 / 2 ** 30, "G": 1e9 / 2 ** 30, "T": 1e12 / 2 ** 30,
            "P": 1e15 / 2 ** 30},
    "cores": {"m": 1e-3, None: 1.0},
}


def quantity_in(unit: str, text: str) -> float | None:
    """A Kubernetes quantity (``4Gi``, ``512Mi``, ``500m``) in ``unit``, rounded for a message; None if it is not one."""
    match = _QUANTITY.match(text)
    if match is None:
        return None
    factor = _UNIT_FACTORS.get(unit, {}).get(match.group(2))
    return None if factor is None else round(float(match.group(1)) * factor, 4)


_BOUND_WORDS = {
    "minimum": "at least",
    "exclusiveMinimum": "greater than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _bad_strings(value: Any, path: list) -> Iterable[str]:
    """Strings that cannot be written as UTF-8 at all (lone surrogates from JSON escapes like \\ud800)."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            yield f"{format_path(path)}: holds an unpaired UTF-16 surrogate (e.g. a JSON \\ud800 escape); it is not valid Unicode"
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _SURROGATE.search(key):
                yield f"{format_path(path)}: a key holds an unpaired UTF-16 surrogate; it is not valid Unicode"
            yield from _bad_strings(item, path + [key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _bad_strings(item, path + [index])


def semantic_problems(values: dict) -> list[str]:
    """Rules across keys that JSON Schema cannot express. Assumes the schema already passed."""
    problems: list[str] = []
    name, replicas = values["name"], values["replicas"]
    last_host = pod_hostname(name, replicas - 1)
    if len(last_host) > MAX_HOSTNAME:
        problems.append(
            f"name: {name!r} is too long for {replicas} replicas: the last pod's hostname {last_host!r} has "
            f"{len(last_host)} characters, the limit is {MAX_HOSTNAME}; shorten the name to at most "
            f"{MAX_HOSTNAME - len(str(replicas - 1)) - 1} characters"
        )

    gpu = values["resources"]["gpu"]
    gpus, procs = gpu["accelerator_count"], values["local_device_count"]
    if gpu["accelerator"] is not None and gpus == 0:
        problems.append(
            f"resources.gpu.accelerator: {gpu['accelerator']!r} is set but resources.gpu.accelerator_count is 0; "
            "set a GPU count or set accelerator to null"
        )
    if gpus and procs is not None and procs > gpus:
        problems.append(
            f"local_device_count: {procs} processes per pod exceed the {gpus} GPUs per pod "
            "(resources.gpu.accelerator_count); use at most one process per GPU, or null for one per GPU"
        )
    cpu = values["resources"]["cpu"]
    if not gpus and procs is not None and procs > math.ceil(cpu):
        problems.append(
            f"local_device_count: {procs} processes per pod need at least {procs} CPUs, but resources.cpu is {cpu}; "
            "raise resources.cpu or lower local_device_count"
        )
    if values["shm_size"] >= values["resources"]["memory"]:
        problems.append(
            f"shm_size: {values['shm_size']} GiB of /dev/shm counts against the pod's memory and must be less "
            f"than resources.memory ({values['resources']['memory']} GiB)"
        )

    for key_path, amount, unit in (
        ("resources.cpu", values["resources"]["cpu"], 1000),
        ("resources.memory", values["resources"]["memory"], 1024),
        ("shm_size", values["shm_size"], 1024),
        ("shared_volume.size", values["shared_volume"]["size"], 1024),
    ):
        if round(amount * unit) < 1:
            smallest = "0.001 (one millicore)" if unit == 1000 else "1/1024 (one MiB)"
            problems.append(f"{key_path}: {amount} is below the smallest unit Kubernetes keeps, {smallest}")

    volume = values["shared_volume"]
    if volume["existing_claim"] is None and replicas > 1 and volume["access_mode"] != "ReadWriteMany":
        problems.append(
            f"shared_volume.access_mode: {replicas} pods share one new volume, which needs ReadWriteMany, "
            f"not {volume['access_mode']}; set ReadWriteMany (and a storage_class that provides it) or "
            "use replicas: 1"
        )
    if volume["existing_claim"] is not None and volume["storage_class"] is not None:
        problems.append(
            "shared_volume.storage_class: only applies to a new claim, but shared_volume.existing_claim is set; "
            "set one of them to null"
        )

    problems.extend(_environment_problems(values))
    problems.extend(_entrypoint_problems(values))
    problems.extend(kubernetes.value_problems(values))
    problems.extend(slurm.value_problems(values))
    for key, value in sorted(values["config_map"].items()):
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"config_map.{key}: {value} is not a finite number")

    return problems


def _reserved_problem(where: str, name: str) -> str:
    return (f"{where}: {name} is set by torchrun or the Job for every process; a value here would be silently "
            "overridden or override torchrun's own flags. Remove it (use replicas, local_device_count, "
            "master_port or resources.cpu instead)")


def _environment_problems(values: dict) -> Iterable[str]:
    built_in = entry_module(values["entrypoint"]) == BUILT_IN_WORKER
    for key, value in sorted(values["config_map"].items()):
        if value is None:  # removes the variable: nothing to check
            continue
        if reserved(key):
            yield _reserved_problem(f"config_map.{key}", key)
        elif built_in and key not in WORKER_VARIABLES and not key.startswith(RUNTIME_PREFIXES):
            close = closest(key, WORKER_VARIABLES)
            hint = f"did you mean {close!r}?" if close else "see `python -m worker --help`"
            yield (f"config_map.{key}: not a variable of the built-in worker ({hint}); another entry point's "
                   "variables are free-form")
        elif built_in and key in WORKER_VARIABLES:
            yield from _worker_value_problems(values, f"config_map.{key}", key, value)
    seen: set[str] = set()
    for index, variable in enumerate(values["env"]):
        name, where = variable["name"], f"env[{index}]"
        if reserved(name):
            yield _reserved_problem(f"{where}.name", name)
        if name in seen:
            yield f"{where}.name: {name} is set twice in env"
        seen.add(name)
        close = closest(name, WORKER_VARIABLES, cutoff=0.8) if built_in and name not in WORKER_VARIABLES else None
        if close is not None and not name.startswith(RUNTIME_PREFIXES):
            yield (f"{where}.name: {name} is not a variable of the built-in worker (did you mean {close!r}?); "
                   "the worker would never read it")
        if ("value" in variable) == ("valueFrom" in variable):
            yield f"{where}: needs exactly one of value and valueFrom"
        elif built_in and name in WORKER_VARIABLES and "value" in variable:
            yield from _worker_value_problems(values, f"{where}.value", name, variable["value"])


def _worker_value_problems(values: dict, where: str, name: str, value: str | int | float | bool) -> Iterable[str]:
    """What the built-in worker would refuse in its pod (exit 78), found at render time by its own check."""
    text = environment_text(value)
    reason = variable_problem(name, text)
    if reason is not None:
        close = closest(text.strip().lower(), WORKER_CHOICES.get(name, ()))  # the choices are lower case
        hint = f" (did you mean {close!r}?)" if close else ""
        yield f"{where}: {value!r} {reason}{hint}"
    elif name == "PRECISION" and text.strip().lower() == "fp16" \
            and not values["resources"]["gpu"]["accelerator_count"]:
        yield (f"{where}: {FP16_NEEDS_CUDA} and resources.gpu.accelerator_count is 0: use bf16 or fp32, or "
               "request GPUs")


def _entrypoint_problems(values: dict) -> Iterable[str]:
    entry = values["entrypoint"]
    if entry["module"] is not None and entry["script"] is not None:
        yield (f"entrypoint: module ({entry['module']}) and script ({entry['script']}) are both set; to run the "
               "script, remove entrypoint.module (or set it to null)")


def validate_values(values: dict) -> dict:
    """Return ``values`` if valid; otherwise raise ValuesError listing every problem of the file at once: the
    schema's, and the rules across keys checked with each wrong value replaced by its default (a rule that
    involves a replaced key is not reported: it would be about the default, not the user's value)."""
    problems = list(_bad_strings(values, []))
    if problems:
        raise ValuesError(*problems)
    import jsonschema  # deferred: only validation needs it, and --help should not pay for it

    validator = jsonschema.Draft202012Validator(load_schema())
    errors = list(validator.iter_errors(values))
    problems = [line for error in errors for line in _schema_messages(error)]
    checked, replaced = _defaults_where_wrong(values, errors)
    if not any(True for _ in validator.iter_errors(checked)):
        problems += [problem for problem in semantic_problems(checked)
                     if not any(_mentions(problem, path) for path in replaced)]
    if problems:
        raise ValuesError(*problems)
    return values


def _defaults_where_wrong(values: Any, errors: list) -> tuple[Any, list[str]]:
    """``values`` with each key the schema refused set to its default (an unknown key dropped), and the
    paths replaced."""
    if not errors:
        return values, []
    checked, defaults, replaced = copy.deepcopy(values), default_values(), []
    for error in errors:
        path = list(error.absolute_path)
        if error.validator == "additionalProperties" or "propertyNames" in error.absolute_schema_path:
            node = _at(checked, path)
            if isinstance(node, dict):
                extra = set(node) - set(error.schema.get("properties", {})) \
                    if error.validator == "additionalProperties" else {error.instance}
                for key in extra:
                    node.pop(key, None)
            continue
        while path and _at(defaults, path) is _MISSING:  # inside a list or a free-form mapping: its container
            path.pop()
        replaced.append(format_path(path))
        if not path:
            return copy.deepcopy(defaults), replaced
        parent = _at(checked, path[:-1])
        if isinstance(parent, dict):  # else the parent is wrong too, and replaced by its own error
            parent[path[-1]] = copy.deepcopy(_at(defaults, path))
    return checked, replaced


_MISSING = object()


def _at(node: Any, path: list) -> Any:
    for part in path:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return _MISSING
    return node


def _mentions(problem: str, path: str) -> bool:
    """Whether ``problem`` is about the key at ``path``, a key inside it, or the mapping holding it."""
    about = problem.partition(":")[0]
    return (path == "(top level)" or path == about or path.startswith((about + ".", about + "["))
            or re.search(rf"(?<![\w.]){re.escape(path)}(?![\w])", problem) is not None)
