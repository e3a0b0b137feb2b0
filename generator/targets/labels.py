"""Kubernetes' syntax for label keys and values (apimachinery's validation), for every check of the values that
names a label: the objects' labels, node selectors, the accelerator label, the NetworkPolicy's pod labels."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from generator.values import describe_value

LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE_RULE = "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "its prefix (before '/') must be a DNS-1123 subdomain of at most 253 characters"
    if not name or len(name) > 63 or not LABEL_NAME.match(name):
        return "its name must be 1-63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
    return None


def label_problems(mapping: Mapping[str, str], key_path: str, *, check_values: bool) -> Iterable[str]:
    """Each key of ``mapping`` (and each value, with ``check_values``) that is not a label's, naming it."""
    for key, value in sorted(mapping.items()):
        where = f"{key_path}.{key}"
        problem = label_key_problem(key)
        if problem:
            yield f"{where}: invalid key: {problem}"
        if check_values and value and (len(value) > 63 or not LABEL_NAME.match(value)):
            yield f"{where}: {describe_value(value)} is not a valid label value: at most 63 characters of {LABEL_VALUE_RULE}"
