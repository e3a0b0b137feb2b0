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

from generator.errors import ValuesError
from generator.resources import default_values, schema
from generator.spec import (
    SECRET_STORAGE_KEYS,
    STORAGE_KEYS,
    JobSpec,
    entry_module,
    environment_text,
    storage_uri_text,
    value_at,
)
from generator.targets import spec_of, targets
from generator.values import describe_value, type_name
from trainer_contract import datasets as staged_datasets
from trainer_contract import names, replica_groups
from trainer_contract.checkpoint_layout import CHECKPOINT_DIR_VARIABLE
from trainer_contract.data_mixture import mixture_problem
from trainer_contract.global_batch import accumulation_problem
from trainer_contract.names import MAX_HOSTNAME, longest_name, pod_hostname
from trainer_contract.pod_environment import RUNTIME_PREFIXES, reserved
from trainer_contract.program_settings import BUILT_IN_PROGRAMS, FP16_NEEDS_CUDA, program_variables
from trainer_contract.quantities import quantity_in
from trainer_contract.settings import variable_choices, variable_problem
from trainer_contract.storage import (
    CREDENTIAL_VARIABLES,
    ENDPOINT_VARIABLES,
    STAGED,
    StorageUriError,
    credential_parameters,
    holds_credentials,
    redacted,
)
from trainer_contract.storage import parse as parse_storage_uri

# Volumes and mount paths of the Job itself (templates/kubernetes/job.yaml.j2): extra_volumes may not take them.

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: no value of ours is more than one line


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
        return [f"{format_path(path + [key])}: unknown key ({_unknown_key_hint(path, key, allowed)})"
                for key in sorted(set(value) - set(allowed), key=str)]
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


# An unknown key's mapping lists its keys in the message only when they are few; the top level's are many.
_LISTED_KEYS = 8
# Where an unknown key may have been meant elsewhere: at most this many places are named.
_ELSEWHERE_SHOWN = 3


# Keys a user may well try that are left out on purpose: why, and what to do instead.
_NOT_OFFERED = {
    ("security", "add_capabilities"): (
        "not offered: capabilities added to a non-root container never reach its processes (Kubernetes puts them "
        "in the bounding set only, and allowPrivilegeEscalation: false ignores file capabilities); for "
        "resources.gpu.network: infiniband NCCL needs an unlimited locked-memory limit instead, which the node's "
        "container runtime sets (containerd: LimitMEMLOCK=infinity) and the launcher checks"),
}
_NOT_OFFERED[("security", "capabilities")] = _NOT_OFFERED[("security", "add_capabilities")]


def _unknown_key_hint(path: list, key: Any, allowed: list[str]) -> str:
    """What an unknown ``key`` of the mapping at ``path`` was probably meant to be, worded for a file and --set
    alike: a key of the same mapping written alike (``replica`` -> 'replicas'), else the same key at another
    place, dotted (``RESUME`` -> config_map.RESUME, ``partition`` -> slurm.partition); a key written exactly
    so elsewhere comes before a merely similar one here (``accelerator_count`` is not ``local_device_count``)."""
    word = str(key)
    declined = _NOT_OFFERED.get((*path, word))
    if declined is not None:
        return declined
    same = closest(word, allowed)
    if same is not None and same.casefold() == word.casefold():
        return f"did you mean {same!r}?"
    elsewhere = _elsewhere(path, word, exact=True)
    if not elsewhere and same is not None:
        return f"did you mean {same!r}?"
    elsewhere = elsewhere or _elsewhere(path, word, exact=False)
    if elsewhere:
        return f"did you mean {' or '.join(elsewhere[:_ELSEWHERE_SHOWN])}?"
    if len(allowed) <= _LISTED_KEYS:
        return "allowed: " + ", ".join(allowed)
    here = "at the top level" if not path else f"of {format_path(path)}"
    return (f"none of the {len(allowed)} keys {here} is like it; see `gen-manifests --print-schema` or the values "
            "table in docs/reference.md")


def _elsewhere(path: list, word: str, *, exact: bool) -> list[str]:
    """The dotted paths, outside the mapping at ``path``, of the keys named ``word`` (in any case) or, unless
    ``exact``, named much like it: the schema's keys and the built-in worker's variables (config_map's).
    The nearest to ``path`` first."""
    level = tuple(None if isinstance(part, int) else part for part in path)
    candidates = [
        key_path for key_path in _key_paths()
        if key_path[:-1] != level
        # a key inside a list's item only within that same item, whose index the hint then names
        and all(part is not None or key_path[:i + 1] == level[:i + 1] for i, part in enumerate(key_path))
    ]
    names = {str(key_path[-1]) for key_path in candidates}
    if exact:
        matches = {name for name in names if name.casefold() == word.casefold()}
    else:
        close = closest(word, names, cutoff=0.75)
        matches = {close} if close is not None else set()

    def shared(key_path: tuple) -> int:  # how many leading keys it has in common with path
        pairs = zip(key_path, level, strict=False)
        return next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(key_path), len(level)))

    chosen = sorted((key_path for key_path in candidates if key_path[-1] in matches),
                    key=lambda key_path: (-shared(key_path), len(key_path), str(key_path)))
    return [format_path(path[i] if part is None else part for i, part in enumerate(key_path))
            + (" at the top level" if len(key_path) == 1 else "") for key_path in chosen]


@lru_cache(maxsize=1)
def _key_paths() -> tuple[tuple[str | None, ...], ...]:
    """Every key the schema names, as its path (None for a list's item), and config_map's worker variables."""
    root = load_schema()
    paths: list[tuple[str | None, ...]] = []

    def walk(node: Any, at: tuple[str | None, ...], refs: frozenset[str]) -> None:
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/") and ref not in refs:
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, dict) else {}
            walk(target, at, refs | {ref})
        for branch in node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", []):
            walk(branch, at, refs)
        walk(node.get("items"), at + (None,), refs)
        for key, sub in node.get("properties", {}).items():
            paths.append(at + (key,))
            walk(sub, at + (key,), refs)

    walk(root, (), frozenset())
    every_variable = frozenset().union(*(program_variables(module) or () for module in BUILT_IN_PROGRAMS))
    paths.extend(("config_map", variable) for variable in sorted(every_variable))
    return tuple(dict.fromkeys(paths))


_BOUND_WORDS = {
    "minimum": "at least",
    "exclusiveMinimum": "greater than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _bad_strings(value: Any, path: list) -> Iterable[str]:
    """Strings no value may hold, in keys as in values, found before the schema runs: lone surrogates (from JSON
    escapes like \\ud800: not writable as UTF-8), and control characters. The schema's patterns match with
    re.search, where "$" also matches before a final newline: "trainjob\\n" would pass as a name, and a newline in
    slurm.shared_dir would split an #SBATCH line."""
    if isinstance(value, str):
        yield from (f"{format_path(path)}: {problem}" for problem in _string_problems(value))
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield from (f"{format_path(path) or 'values'}: the key {ascii(key)} {problem}"
                            for problem in _string_problems(key))
            yield from _bad_strings(item, path + [key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _bad_strings(item, path + [index])


def _string_problems(text: str) -> Iterable[str]:
    if _SURROGATE.search(text):
        yield "holds an unpaired UTF-16 surrogate (e.g. a JSON \\ud800 escape); it is not valid Unicode"
    control = _CONTROL.search(text)
    if control:
        yield (f"holds a control character ({ascii(control.group())[1:-1]} at position {control.start()}); "
               "write it on one line, without tabs, newlines or other control characters")


def name_length_problem(name: str, replicas: int | None) -> str | None:
    """Why ``name`` is too long for ``replicas`` pods, its limit first; None if it fits. The one wording of
    the rule, for the schema's maxLength and the rule across keys alike. ``replicas`` None: not known (it is
    invalid itself), and only a name over MAX_HOSTNAME is certainly too long."""
    if replicas is None:
        if len(name) <= longest_name(1):
            return None
        return (f"name: {name!r} has {len(name)} characters; it may have at most {longest_name(10)} with up to "
                f"10 replicas, fewer with more (pod hostnames <name>-<index> must fit in {MAX_HOSTNAME})")
    limit = longest_name(replicas)
    if len(name) <= limit:
        return None
    hosts = (f"the pod hostname {pod_hostname('<name>', 0)}" if replicas == 1
             else f"pod hostnames {pod_hostname('<name>', 0)} .. {pod_hostname('<name>', replicas - 1)}")
    return (f"name: {name!r} has {len(name)} characters; with {replicas} replica{'s' if replicas != 1 else ''} "
            f"it may have at most {limit} ({hosts} must fit in {MAX_HOSTNAME})")


def semantic_problems(values: dict, spec: JobSpec) -> list[str]:
    """Rules across keys that JSON Schema cannot express, every target's own included (a values file stays
    valid for all of them). Assumes the schema already passed; ``spec`` is the values' spec."""
    return neutral_problems(values) + list(_storage_use_problems(spec)) + list(_pattern_problems(values, spec)) + \
        list(_metrics_problems(spec)) + list(_batch_problems(spec)) + list(_mixture_problems(spec)) + \
        list(_datasets_problems(spec)) + list(_replica_group_problems(spec)) + [
        problem for target in targets().values() for problem in target.option_problems(spec)]


def _pattern_problems(values: dict, spec: JobSpec) -> Iterable[str]:
    """allow_patterns and ignore_patterns select the files of a Hub repository (a Secret's URI may name one)."""
    for role in STAGED:
        source = spec.storage.get(role)
        for key in ("allow_patterns", "ignore_patterns"):
            if values["initializer"][role].get(key) is not None and (source is None or source.scheme
                                                                     not in ("hf", "secret")):
                has = "no storage_uri" if source is None else f"storage_uri {source.text}"
                yield (f"initializer.{role}.{key}: selects files of an hf:// repository, and the {role} has {has}: "
                       "remove it")


def _batch_problems(spec: JobSpec) -> Iterable[str]:
    """GLOBAL_BATCH_SIZE kept on the job's processes (replicas x processes per pod), as the program will check."""
    config = spec.program_config()
    if config is None or not hasattr(config, "global_batch_size"):
        return
    problem = accumulation_problem(config, spec.replicas * spec.procs_per_node)
    if problem:
        yield f"config_map.{problem} (replicas {spec.replicas} x {spec.procs_per_node} processes per pod)"


def _mixture_problems(spec: JobSpec) -> Iterable[str]:
    """TRAIN_WEIGHTS weighs TRAIN_FILES' globs, one weight each, as the program will check."""
    config = spec.program_config()
    problem = mixture_problem(config) if config is not None else None
    if problem:
        yield f"config_map.{problem}"


def _datasets_problems(spec: JobSpec) -> Iterable[str]:
    """initializer.datasets in place of initializer.dataset, for a program that names their files."""
    if not spec.datasets:
        return
    if "dataset" in spec.storage:
        yield ("initializer.datasets: stages the datasets in place of initializer.dataset, which has a storage URI "
               "too: set one of them to null")
    config = spec.program_config()
    if config is None:  # a program of the user's reads DATASET_DIR/<name> as it likes
        return
    if not staged_datasets.reads_several(config):
        yield (f"initializer.datasets: {spec.program[1]} reads one dataset (DATASET_DIR or DATA_DIR), and "
               f"initializer.datasets stages {len(spec.datasets)} by name: use initializer.dataset")
        return
    problem = staged_datasets.files_problem(config, list(spec.datasets))
    if problem:
        yield f"config_map.{problem}"


def _replica_group_problems(spec: JobSpec) -> Iterable[str]:
    """fault_tolerance.replica_groups: the built-in MNIST worker with a replicated strategy, a floor within the
    groups, and a Lighthouse's name that fits a Service's."""
    if spec.min_replicas is None:
        if spec.max_replicas is not None:
            yield ("fault_tolerance.max_replicas: only a job of replica groups can be scaled while it runs; set "
                   "fault_tolerance.replica_groups to true, or max_replicas to null")
        return
    if spec.max_replicas is not None and spec.max_replicas < spec.replicas:
        yield (f"fault_tolerance.max_replicas: {spec.max_replicas} is fewer than the groups the job starts with "
               f"(replicas {spec.replicas}): at least {spec.replicas}, or null")
    module = spec.program[1] if spec.built_in_worker else None
    shown = f"python {' '.join(spec.program[:2])}" if spec.program[0] == "-m" else spec.program[0]
    refused = replica_groups.program_problem(module, shown)
    config = spec.program_config()
    if refused is not None:
        yield (f"fault_tolerance.replica_groups: {refused}: set entrypoint.module to one of them (null: the MNIST "
               "worker), or replica_groups to false")
    elif module is not None and config is not None:
        yield from (f"config_map.{problem}" for problem in replica_groups.setting_problems(module, config))
    if "checkpoint" in spec.storage:
        yield ("checkpoint.storage_uri: with fault_tolerance.replica_groups the checkpoints stay on the volume (a "
               "bucket's mirror from several groups is not yet): remove it, or set replica_groups to false")
    if spec.min_replicas > spec.replicas:
        yield (f"fault_tolerance.min_replicas: {spec.min_replicas} is more than the groups there are (replicas "
               f"{spec.replicas}): at most {spec.replicas}")
    lighthouse = names.lighthouse_name(spec.name)
    if len(lighthouse) > names.MAX_HOSTNAME:
        yield (f"name: {spec.name!r} has {len(spec.name)} characters; with fault_tolerance.replica_groups at most "
               f"{names.MAX_HOSTNAME - len(lighthouse) + len(spec.name)}: the Lighthouse's Service is {lighthouse}")


def _metrics_problems(spec: JobSpec) -> Iterable[str]:
    if spec.metrics_port is not None and spec.metrics_port == spec.master_port:
        yield (f"metrics.port: {spec.metrics_port} is master_port too (the rendezvous): give the metrics another "
               "port")


def _storage_use_problems(spec: JobSpec) -> Iterable[str]:
    """What the storage URIs need of the rest of the job."""
    if "export" in spec.storage and spec.launcher != "indexed-trainer":
        yield ("export.storage_uri: the indexed-trainer launcher uploads the export when training ends, and "
               "entrypoint.launcher is torchrun, which uploads nothing: remove entrypoint.launcher (or set "
               "indexed-trainer)")
    if spec.mirrors_own_checkpoints and spec.launcher != "indexed-trainer":
        program = " ".join(spec.program[:2]) if spec.program[0] == "-m" else spec.program[0]
        yield (f"checkpoint.storage_uri: the indexed-trainer launcher mirrors the checkpoints {program} writes into "
               f"{CHECKPOINT_DIR_VARIABLE}, and entrypoint.launcher is torchrun, which mirrors nothing: remove "
               "entrypoint.launcher (or set indexed-trainer; the image then needs indexed-trainer[staging])")
    checkpoints, export = spec.storage.get("checkpoint"), spec.storage.get("export")
    if spec.checkpoint_signing is not None and checkpoints is None:
        yield ("checkpoint.signing_secret: signs the checkpoints' listings in the bucket, and checkpoint.storage_uri "
               "is not set: set it, or remove checkpoint.signing_secret")
    if spec.mirrors_own_checkpoints and checkpoints is not None and export is not None \
            and export.bucket == checkpoints.bucket \
            and (not checkpoints.prefix or f"{export.prefix}/".startswith(f"{checkpoints.prefix}/")):
        # every name under the prefix is one of the program's checkpoints, which the mirror removes once the
        # directory no longer holds it (a built-in program's naming never matches an export's name)
        yield (f"export.storage_uri: {export.text} is inside checkpoint.storage_uri {checkpoints.text}, where the "
               f"mirror keeps only what {CHECKPOINT_DIR_VARIABLE} holds (it would remove the export): give the "
               "export a prefix of its own")


def neutral_problems(values: dict) -> list[str]:
    """The rules across keys every target shares."""
    problems: list[str] = []
    replicas = values["replicas"]
    name_problem = name_length_problem(values["name"], replicas)
    if name_problem is not None:
        problems.append(name_problem)

    gpu = values["resources"]["gpu"]
    gpus, procs = gpu["accelerator_count"], values["local_device_count"]
    if gpu["accelerator"] is not None and gpus == 0:
        problems.append(
            f"resources.gpu.accelerator: {gpu['accelerator']!r} is set but resources.gpu.accelerator_count is 0; "
            "set a GPU count or set accelerator to null"
        )
    if gpu["network"] is not None and gpus == 0:
        problems.append(
            f"resources.gpu.network: {gpu['network']!r} presets NCCL, which a job without GPUs does not use "
            "(resources.gpu.accelerator_count is 0); set a GPU count or set network to null"
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
    problems.extend(_environment_problems(values))
    problems.extend(_credential_problems(values))
    problems.extend(_entrypoint_problems(values))
    for key, value in sorted(values["config_map"].items()):
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"config_map.{key}: {value} is not a finite number")

    return problems


def _reserved_problem(where: str, name: str) -> str:
    return (f"{where}: {name} is set by torchrun or the Job for every process; a value here would be silently "
            "overridden or override torchrun's own flags. Remove it (use replicas, local_device_count, "
            "master_port, resources.cpu or resources.gpu instead)")


def _environment_problems(values: dict) -> Iterable[str]:
    module = entry_module(values["entrypoint"])
    known = program_variables(module)  # None: the user's program, whose variables are free-form
    built_in = known is not None
    program = f"python -m {module}"
    known = known or frozenset()
    for key, value in sorted(values["config_map"].items()):
        if value is None:  # removes the variable: nothing to check
            continue
        if reserved(key):
            yield _reserved_problem(f"config_map.{key}", key)
        elif built_in and key not in known and not key.startswith(RUNTIME_PREFIXES) \
                and key not in CREDENTIAL_VARIABLES:  # those have their own rule
            close = closest(key, known)
            hint = f"did you mean {close!r}?" if close else f"see `{program} --help`"
            yield (f"config_map.{key}: not a variable of {program} ({hint}); another entry point's "
                   "variables are free-form")
        elif key in known:
            yield from _worker_value_problems(values, f"config_map.{key}", key, value)
    seen: set[str] = set()
    for index, variable in enumerate(values["env"]):
        name, where = variable["name"], f"env[{index}]"
        if reserved(name):
            yield _reserved_problem(f"{where}.name", name)
        if name in seen:
            yield f"{where}.name: {name} is set twice in env"
        seen.add(name)
        close = closest(name, known, cutoff=0.8) if built_in and name not in known else None
        if close is not None and not name.startswith(RUNTIME_PREFIXES):
            yield (f"{where}.name: {name} is not a variable of {program} (did you mean {close!r}?); "
                   "it would never read it")
        if ("value" in variable) == ("valueFrom" in variable):
            yield f"{where}: needs exactly one of value and valueFrom"
        elif name in known and "value" in variable:
            yield from _worker_value_problems(values, f"{where}.value", name, variable["value"])


def _credential_problems(values: dict) -> Iterable[str]:
    """A token or key written into the values would be written into the render (the ConfigMap, the script)."""
    fix = ("credentials come from a Secret only: env: [{name: NAME, valueFrom: {secretKeyRef: {name: SECRET, key: "
           "KEY}}}] or env_from_secrets (on Slurm: export it where sbatch runs)")
    for key in sorted(values["config_map"]):
        if key in CREDENTIAL_VARIABLES and values["config_map"][key] is not None:
            yield f"config_map.{key}: {fix}"
    for index, variable in enumerate(values["env"]):
        if variable["name"] in CREDENTIAL_VARIABLES and "value" in variable:
            yield f"env[{index}].value: {variable['name']}: {fix}"
    endpoints = [(f"config_map.{key}", key, value) for key, value in sorted(values["config_map"].items())]
    endpoints += [(f"env[{index}].value", variable["name"], variable.get("value"))
                  for index, variable in enumerate(values["env"])]
    for where, name, value in endpoints:
        if name in ENDPOINT_VARIABLES and isinstance(value, str) and holds_credentials(value):
            yield (f"{where}: {name}={redacted(value)!r} holds a user, password or query values, which a render "
                   "writes out: give the endpoint's address only; credentials come from a Secret (env_from_secrets)")


def _worker_value_problems(values: dict, where: str, name: str, value: str | int | float | bool) -> Iterable[str]:
    """What the built-in program would refuse in its pod (exit 78), found at render time by its own check."""
    config_class = BUILT_IN_PROGRAMS[entry_module(values["entrypoint"]) or ""]
    text = environment_text(value)
    reason = variable_problem(name, text, config_class)
    if reason is not None:
        close = closest(text.strip().lower(), variable_choices(config_class).get(name, ()))  # lower-case words
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


def validate_values(values: dict) -> JobSpec:
    """The JobSpec of ``values`` if they are valid; otherwise raise ValuesError listing every problem of the
    file at once: the schema's, and the rules across keys checked with each wrong value replaced by its default (a rule that
    involves a replaced key is not reported: it would be about the default, not the user's value)."""
    problems = list(_bad_strings(values, []))
    if problems:
        raise ValuesError(*problems)
    import jsonschema  # deferred: only validation needs it, and --help should not pay for it

    validator = jsonschema.Draft202012Validator(load_schema())
    errors = list(validator.iter_errors(values))
    problems = [line for error in errors for line in _messages(error, values, errors)]
    checked, replaced = _defaults_where_wrong(values, errors)
    spec = None
    if not any(True for _ in validator.iter_errors(checked)):
        wrong, checked, unusable = _storage_problems(checked)
        problems += wrong
        replaced += unusable
        spec = spec_of(checked)  # the values' own when nothing was replaced
        problems += [problem for problem in semantic_problems(checked, spec)
                     if not any(_mentions(problem, path) for path in replaced)]
        if "replicas" in replaced and "name" not in replaced:  # too long for any replicas
            problems += filter(None, [name_length_problem(checked["name"], None)])
    if problems or spec is None:
        raise ValuesError(*problems)
    return spec


def _storage_problems(values: dict) -> tuple[list[str], dict, list[str]]:
    """Each storage URI that cannot be used, as ``key: why``; the values with those set to null (a copy: so that
    the spec can be built and the other rules checked), and their keys."""
    problems, replaced, checked = [], [], values

    def unusable(keys: tuple[str, ...], problem: str) -> None:
        nonlocal checked
        problems.append(f"{'.'.join(keys)}: {problem}")
        replaced.append(".".join(keys))
        if checked is values:
            checked = copy.deepcopy(values)
        node = checked
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = None

    for role, keys in STORAGE_KEYS.items():
        text = storage_uri_text(values, role)
        if text is None:
            continue
        secret_keys = SECRET_STORAGE_KEYS.get(role)
        try:
            parse_storage_uri(text, role)
        except StorageUriError as exc:
            unusable(keys, str(exc))
            continue
        parameters = credential_parameters(text)
        if parameters:
            way = (f"put the URI into a Secret and name its key in {'.'.join(secret_keys)}" if secret_keys
                   else "credentials come from a Secret (env_from_secrets)")
            unusable(keys, f"{redacted(text)!r} carries a credential in its query ({', '.join(parameters)}), which "
                           f"a render writes into the ConfigMap and every log: {way}")
        elif secret_keys is not None and value_at(values, secret_keys) is not None:
            unusable(secret_keys, f"{'.'.join(keys)} is set too: the URI comes from one of them; set the other "
                                  "to null")
    dataset_problems = list(_dataset_uri_problems(values))
    if dataset_problems:  # the list is left out whole: its DATASET_DIR is derived from every entry
        problems += dataset_problems
        replaced.append("initializer.datasets")
        checked = copy.deepcopy(checked) if checked is values else checked
        checked["initializer"]["datasets"] = None
    return problems, checked, replaced


def _dataset_uri_problems(values: dict) -> Iterable[str]:
    """Each initializer.datasets URI that cannot be staged into DATASET_DIR/<name>, as ``key: why``."""
    for name, entry in (values["initializer"].get("datasets") or {}).items():
        key, text = f"initializer.datasets.{name}.storage_uri", entry["storage_uri"]
        try:
            uri = parse_storage_uri(text, "dataset")
        except StorageUriError as exc:
            yield f"{key}: {exc}"
            continue
        parameters = credential_parameters(text)
        if parameters:
            yield (f"{key}: {redacted(text)!r} carries a credential in its query ({', '.join(parameters)}), which a "
                   "render writes into the ConfigMap and every log: stage it as initializer.dataset, whose "
                   "storage_uri_secret takes the URI from a Secret")
        elif uri.scheme == "path":
            yield (f"{key}: {text} is on the shared volume already and is not staged: give DATASET_DIR's datasets "
                   "as hf://, s3:// or https:// URIs, or put the files under one directory (initializer.dataset)")
        for patterns in ("allow_patterns", "ignore_patterns"):
            if entry.get(patterns) is not None and uri.scheme != "hf":
                yield (f"initializer.datasets.{name}.{patterns}: selects files of an hf:// repository, and {name}'s "
                       f"storage_uri is {uri.describe}: remove it")


def _messages(error, values: Any, errors: list) -> list[str]:
    """``_schema_messages``, but a name over the schema's maxLength is worded as the rule across keys words it:
    with the limit for the file's replicas (unless replicas is wrong too)."""
    if error.validator == "maxLength" and list(error.absolute_path) == ["name"] and isinstance(error.instance, str):
        replicas = values.get("replicas") if isinstance(values, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool) \
                or any(list(other.absolute_path)[:1] == ["replicas"] for other in errors):
            replicas = None
        problem = name_length_problem(error.instance, replicas)
        if problem is not None:
            return [problem]
    return _schema_messages(error)


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
