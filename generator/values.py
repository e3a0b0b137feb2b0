"""Reading values: files (JSON or YAML), their layering, and ``--set`` overrides. Nothing here validates meaning."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
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


# Layered values files (a platform's, then a team's) merge as kustomize's strategic merge patch does: a list of
# keyed items merges item by item, so that a team's toleration does not silently drop the platform's.
PATCH = "$patch"  # kustomize's spelling of the marker


@dataclass(frozen=True)
class KeyedList:
    """A list whose items merge by the fields ``by`` (a missing field is its own value, null); ``noun`` names one."""

    by: tuple[str, ...]
    noun: str


@dataclass(frozen=True)
class StringSet:
    """A list of names: the later file's are added after the earlier ones', each once."""


@dataclass(frozen=True)
class NullRemoves:
    """A free-form map merged key by key, where a later file's null removes the key (``keep_null``: it stays null,
    for the render to remove what it would show)."""

    keep_null: bool = False


LayerRule = KeyedList | StringSet | NullRemoves

# How each values file merges over the earlier ones, by key path; docs/operators.md ("Layered values") shows this
# table. Elsewhere mappings merge key by key and anything else, any other list included, replaces.
LAYERED: dict[tuple[str, ...], LayerRule] = {
    ("tolerations",): KeyedList(("key", "effect"), "a toleration"),
    ("env",): KeyedList(("name",), "a variable"),
    ("extra_volumes",): KeyedList(("name",), "a volume"),
    ("image_pull_secrets",): StringSet(),
    ("env_from_secrets",): StringSet(),
    ("labels",): NullRemoves(),
    ("annotations",): NullRemoves(),
    ("node_selector",): NullRemoves(),
    ("pod_labels",): NullRemoves(),
    ("pod_annotations",): NullRemoves(),
    ("resources", "extra"): NullRemoves(),
    # the render already reads a null as "remove the variable it would show" (spec._environment)
    ("config_map",): NullRemoves(keep_null=True),
}


def layer_values(earlier: dict, later: dict, source: str) -> dict:
    """``later`` (read from the values file ``source``) merged over ``earlier`` as LAYERED says; the result holds
    no ``$patch`` marker. Neither input is modified."""
    merged = copy.deepcopy(earlier)
    _layer_into(merged, copy.deepcopy(later), source, ())
    return merged


def _layer_into(merged: dict, later: dict, source: str, at: tuple[str, ...]) -> None:
    for key, value in later.items():
        where = (*at, key)
        rule = LAYERED.get(where)
        if rule is not None:
            merged[key] = _merge_by_rule(rule, merged.get(key), value, source, where)
        elif key != PATCH and isinstance(value, dict) and isinstance(merged.get(key), dict):
            _layer_into(merged[key], value, source, where)
        else:
            _refuse_markers({key: value}, source, ".".join(at))
            merged[key] = value


def _merge_by_rule(rule: LayerRule, earlier: Any, later: Any, source: str, where: tuple[str, ...]) -> Any:
    text = ".".join(where)
    if isinstance(rule, NullRemoves) and isinstance(later, dict):
        _refuse_markers(later, source, text)
        merged = dict(earlier) if isinstance(earlier, dict) else {}
        for name, value in later.items():
            if value is None and not rule.keep_null:
                merged.pop(name, None)
            else:
                merged[name] = value
        return merged
    if isinstance(rule, NullRemoves) or not isinstance(later, list):
        _refuse_markers(later, source, text)
        return later  # not the shape the rule merges: it replaces, and the schema judges it
    items, replace = _without_replace_marker(later, source, text)
    base = earlier if isinstance(earlier, list) and not replace else []
    if isinstance(rule, StringSet):
        _refuse_markers([item for _, item in items], source, text)
        return _union([*base, *(item for _, item in items)])
    return _merge_keyed(rule, base, items, source, text)


def _without_replace_marker(later: list, source: str, text: str) -> tuple[list[tuple[int, Any]], bool]:
    """The list's items with their indexes, less a first item {"$patch": "replace"}; and whether it had one."""
    first = later[0] if later else None
    if not (isinstance(first, dict) and first.get(PATCH) == "replace"):
        return list(enumerate(later)), False
    if len(first) != 1:
        raise ValuesError(f'{source}: {text}[0]: {{"$patch": "replace"}} stands alone as the first item; move the '
                          "other fields into an item of their own")
    return list(enumerate(later))[1:], True


def _union(items: list) -> list:
    seen: set[str] = set()
    kept = []
    for item in items:
        mark = json.dumps(item, sort_keys=True)
        if mark not in seen:
            seen.add(mark)
            kept.append(item)
    return kept


def _item_key(rule: KeyedList, item: dict) -> str:
    return json.dumps([item.get(field) for field in rule.by], sort_keys=True)


def _split_patch_items(rule: KeyedList, items: list[tuple[int, Any]], source: str,
                       text: str) -> tuple[list[dict], list[tuple[str, dict]]]:
    """The later file's items that set (in order) and those that delete (with their indexes), markers checked."""
    sets: list[dict] = []
    deletes: list[tuple[str, dict]] = []
    for index, item in items:
        at = f"{text}[{index}]"
        if not isinstance(item, dict):
            raise ValuesError(f"{source}: {at}: must be a mapping ({rule.noun} merges by {', '.join(rule.by)}), not "
                              f"{type_name(item)}")
        marked, marker = PATCH in item, item.pop(PATCH, None)
        _refuse_markers(item, source, at)
        if not marked:
            sets.append(item)
        elif marker == "delete":
            deletes.append((at, item))
        else:
            raise ValuesError(f'{source}: {at}: "$patch": {describe_value(marker)} is not a merge marker: use '
                              f'"delete" to remove the earlier item of this key, or {{"$patch": "replace"}} alone as '
                              "the first item to replace the whole list")
    return sets, deletes


def _merge_keyed(rule: KeyedList, base: list, items: list[tuple[int, Any]], source: str, text: str) -> list:
    """``base`` with the later file's items: each deletes every earlier item of its key, or replaces them in place
    (the n-th of a key the n-th; earlier ones beyond the later's count dropped, later ones beyond appended)."""
    sets, deletes = _split_patch_items(rule, items, source, text)
    earlier_keys = {_item_key(rule, old) for old in base if isinstance(old, dict)}
    for at, item in deletes:
        if _item_key(rule, item) not in earlier_keys:
            named = " and ".join(f"{field} {describe_value(item.get(field))}" for field in rule.by)
            raise ValuesError(f'{source}: {at}: "$patch": delete removes nothing: no earlier file set {rule.noun} '
                              f"with {named}")
    deleted = {_item_key(rule, item) for _, item in deletes}
    base = [old for old in base if not (isinstance(old, dict) and _item_key(rule, old) in deleted)]
    groups: dict[str, list[dict]] = {}
    for item in sets:
        groups.setdefault(_item_key(rule, item), []).append(item)
    merged: list[Any] = []
    used = dict.fromkeys(groups, 0)
    for old in base:
        key = _item_key(rule, old) if isinstance(old, dict) else None
        if key not in groups:
            merged.append(old)
        elif used[key] < len(groups[key]):
            merged.append(groups[key][used[key]])
            used[key] += 1
    seen = dict.fromkeys(groups, 0)
    for item in sets:  # those beyond the earlier ones of their key, in the file's order
        key = _item_key(rule, item)
        seen[key] += 1
        if seen[key] > used[key]:
            merged.append(item)
    return merged


def _refuse_markers(value: Any, source: str, text: str) -> None:
    """Refuse a ``$patch`` anywhere in ``value`` (at ``text``): only a merged list's items take one."""
    stack = [(value, text)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            if PATCH in node:
                lists = ", ".join(".".join(path) for path, rule in LAYERED.items() if isinstance(rule, KeyedList))
                at = f"{where}.{PATCH}" if where else PATCH
                raise ValuesError(f'{source}: {at}: "$patch" only marks an item of {lists} ("delete"), or stands '
                                  'as the first item {"$patch": "replace"} of a list that merges')
            stack.extend((child, f"{where}.{key}" if where else key) for key, child in node.items())
        elif isinstance(node, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(node))


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
        values = layer_values(values, with_hyperparameters(load_values_file(path), Path(path)), str(path))
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
