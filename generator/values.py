"""Reading values: files (JSON or YAML), deep merge, and ``--set`` overrides. Nothing here validates meaning."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from generator.errors import ValuesError

# A values file is a small configuration: anything bigger is a mistake (or an attack), and parsing
# 100 MB of YAML in pure Python would take minutes.
MAX_VALUES_BYTES = 4 * 1024 * 1024
# Bound on the nodes of the fully expanded document, so that a YAML alias bomb ("billion laughs")
# is refused instead of being walked exponentially by the merge and the validator.
MAX_VALUE_NODES = 100_000


# libyaml's parser when PyYAML has it (ten times faster: start-up matters), the pure-Python one otherwise.
if TYPE_CHECKING:
    FastSafeLoader = yaml.SafeLoader
else:
    FastSafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(FastSafeLoader):
    """A safe loader that refuses duplicate keys: a repeated key is almost always a typo that loses a value."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is not a string (quote it)", key_node.start_mark
            )
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _count_nodes(value: Any, budget: int) -> int:
    """Return the budget left after walking ``value``; raise once it is spent."""
    stack = [value]
    while stack:
        budget -= 1
        if budget < 0:
            raise OverflowError
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return budget


def _parse_json(text: str, source: str):
    # JSON files go through the json module: it decodes escaped surrogate pairs (an emoji written by
    # json.dumps as \ud83d\ude42) into the character, where YAML parsers reject or corrupt them.
    def unique_keys(pairs):
        mapping = {}
        for key, value in pairs:
            if key in mapping:
                raise ValuesError(f"{source}: duplicate key {key!r}")
            mapping[key] = value
        return mapping

    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise ValuesError(f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None


def _parse_yaml(text: str, source: str):
    try:
        documents = list(yaml.load_all(text, Loader=_UniqueKeyLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValuesError(f"{source}: not valid YAML{where}: {problem}") from None
    if len(documents) > 1:
        raise ValuesError(f"{source}: holds {len(documents)} YAML documents; a values file holds one")
    return documents[0] if documents else None


def parse_values_text(text: str, source: str, *, json_syntax: bool = False) -> dict:
    """Parse one values document into a mapping; ``source`` names it in errors."""
    try:
        data = _parse_json(text, source) if json_syntax else _parse_yaml(text, source)
    except RecursionError:
        raise ValuesError(f"{source}: nested too deeply to be a values file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValuesError(
            f"{source}: the top level must be a mapping of keys to values, not {type_name(data)}"
        )
    try:
        _count_nodes(data, MAX_VALUE_NODES)
    except OverflowError:
        raise ValuesError(
            f"{source}: expands to more than {MAX_VALUE_NODES} values (a YAML alias bomb?); "
            "write the values out without anchors"
        ) from None
    return data


def load_values_file(path: str | Path) -> dict:
    """Read and parse one values file, refusing oversized, binary and non-UTF-8 input."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_VALUES_BYTES + 1)
    except OSError as exc:
        raise ValuesError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_VALUES_BYTES:
        raise ValuesError(
            f"{path}: larger than {MAX_VALUES_BYTES // (1024 * 1024)} MiB; a values file is a small "
            "configuration"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValuesError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from None
    if "\x00" in text:
        raise ValuesError(f"{path}: contains NUL bytes: a binary file, not a values file")
    return parse_values_text(text, str(path), json_syntax=path.suffix.lower() == ".json")


def deep_merge(base: dict, override: dict) -> dict:
    """Return ``base`` with ``override`` merged in: mappings merge key by key, anything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def split_key_path(dotted: str) -> list[str]:
    r"""Split ``a.b.c`` into its keys; ``\.`` keeps a dot inside a key (``labels.team\.io/owner``)."""
    keys, current, escaped = [], [], False
    for char in dotted:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ".":
            keys.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    keys.append("".join(current))
    return keys


def parse_set_value(raw: str) -> Any:
    """Type a ``--set`` value as YAML would (3 -> int, true -> bool, [a, b] -> list); else keep the text."""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    # An empty right-hand side means the empty string, not null: "--set image=" is rarely a request for null.
    return "" if value is None and raw.strip() == "" else value


def apply_set(values: dict, assignment: str, *, as_string: bool) -> dict:
    """Apply one ``KEY.PATH=VALUE`` assignment, returning a new mapping."""
    option = "--set-string" if as_string else "--set"
    key_text, sep, raw_value = assignment.partition("=")
    keys = split_key_path(key_text)
    if not sep or not key_text or any(key == "" for key in keys):
        raise ValuesError(f"{option} {assignment!r}: expected KEY=VALUE, e.g. {option} replicas=4")
    value = raw_value if as_string else parse_set_value(raw_value)
    result = copy.deepcopy(values)
    node = result
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            path = ".".join(keys[: depth + 1])
            raise ValuesError(
                f"{option} {assignment!r}: {path} is {type_name(child)}, not a mapping, so it has no key "
                f"{keys[depth + 1]!r}"
            )
        node = child
    node[keys[-1]] = value
    return result


def resolve_values(
    default_path: Path,
    values_files: Iterable[str | Path],
    sets: Iterable[str] = (),
    set_strings: Iterable[str] = (),
) -> dict:
    """Defaults, then each values file in order, then ``--set``, then ``--set-string``."""
    values = load_values_file(default_path)
    for path in values_files:
        values = deep_merge(values, with_hyperparameters(load_values_file(path), Path(path)))
    for assignment in sets:
        values = apply_set(values, assignment, as_string=False)
    for assignment in set_strings:
        values = apply_set(values, assignment, as_string=True)
    if HYPERPARAMETERS_KEY in values:  # the schema lists it for its table and editors; only a file can name one
        raise ValuesError(f"{HYPERPARAMETERS_KEY}: name it in a values file (--values), relative to that file; "
                          "--set cannot give one (set config_map.NAME=value instead)")
    return values


# A values file's key naming a YAML file of hyper-parameters (a seed's config.yaml: batch_size: 16, ...), relative
# to the values file: each becomes the config_map variable of its name in capitals, so the job's settings are
# that file and nothing else.
HYPERPARAMETERS_KEY = "hyperparameters_file"
HYPERPARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def hyperparameters_path(named: str, source: Path) -> Path:
    """The file ``named`` in the values file ``source``, which must lie under that file's directory: a values file
    passed around (a shared repository, a ticket) must not read whatever YAML the rendering machine holds (an
    absolute path, '..', a link out) into the ConfigMap."""
    base = source.parent.resolve()
    if Path(named).is_absolute():
        raise ValuesError(f"{source}: {HYPERPARAMETERS_KEY}: {named!r} is an absolute path: name the file relative "
                          "to the values file, in its directory or below")
    path = (base / named).resolve()  # '..' and every link followed: where the read would really go
    if not path.is_relative_to(base):
        raise ValuesError(f"{source}: {HYPERPARAMETERS_KEY}: {named!r} leads out of {base} (through '..' or a "
                          "symbolic link): keep the file in the values file's directory or below")
    return path


def with_hyperparameters(values: dict, source: Path) -> dict:
    """``values`` (read from ``source``) with the file its hyperparameters_file names merged into config_map."""
    if HYPERPARAMETERS_KEY not in values:
        return values
    values = dict(values)
    named = values.pop(HYPERPARAMETERS_KEY)
    if not isinstance(named, str) or not named.strip():
        raise ValuesError(f"{source}: {HYPERPARAMETERS_KEY} must name a YAML file (config.yaml), not "
                          f"{describe_value(named)}")
    path = hyperparameters_path(named, source)
    hyperparameters = load_values_file(path)
    own = values.get("config_map") or {}
    merged = dict(own)
    for name, value in hyperparameters.items():
        if not HYPERPARAMETER_NAME.match(name) or isinstance(value, (dict, list)):
            raise ValuesError(f"{path}: {name}: each hyper-parameter must be a name (letters, digits, '_') with "
                              f"a single value, not {type_name(value)}")
        variable = name.upper()
        if variable in own:
            raise ValuesError(f"{source}: config_map.{variable} is also set by {path} ({name}): keep one")
        merged[variable] = value
    values["config_map"] = merged
    return values


def type_name(value: Any) -> str:
    """A user-facing name for a parsed value's type."""
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def describe_value(value: Any) -> str:
    """A value as a message shows it: JSON, cut at 60 characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
