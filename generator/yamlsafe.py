"""Emit any value as YAML that reads back as exactly that value.

Every user value reaches the templates' YAML through :func:`to_yaml`. It writes JSON (a subset of YAML's
flow style) with strings always double-quoted, so no content can end a scalar, start a comment, add a key,
or be re-typed (``no``, ``on``, ``0755``, ``1:30`` stay strings). Unlike Jinja's ``tojson`` it keeps
non-ASCII characters as they are: ``tojson`` escapes an emoji as a UTF-16 surrogate pair, which PyYAML
decodes into two broken characters. Characters YAML treats as line breaks or may not hold raw
(NEL, LS, PS, C1 controls, BOM, non-characters) are written as escapes.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Raw in a double-quoted YAML scalar, these would be folded as line breaks (U+0085, U+2028, U+2029) or
# rejected as non-printable (C1 controls, DEL, BOM, U+FFFE/U+FFFF). json.dumps already escapes C0 controls.
_YAML_UNSAFE = re.compile("[\u007f-\u009f\u2028\u2029\ufeff\ufffe\uffff]")


def _escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def to_yaml(value: Any) -> str:
    """One line of YAML flow syntax for ``value`` (a string, number, boolean, null, list or mapping)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} cannot be written as a YAML number")
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
    return _YAML_UNSAFE.sub(_escape, text)


def to_yaml_string(value: Any) -> str:
    """``value`` as a YAML string, whatever its type: ``3`` becomes ``"3"`` (ConfigMap data, env values)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r}: a boolean has no single spelling as text; quote it")
    if isinstance(value, float):
        # repr() is the shortest text that reads back as the same float: 0.01, not 0.010000000000000002
        value = repr(value)
    return to_yaml(str(value))


def to_yaml_mapping(items: dict, indent: int) -> str:
    """A block mapping of string keys, one ``key: value`` line each, sorted, indented by ``indent`` spaces."""
    pad = " " * indent
    return "\n".join(f"{pad}{to_yaml(key)}: {to_yaml(value)}" for key, value in sorted(items.items()))
