"""Kubernetes resource quantities ("500m", "2", "4Gi") as numbers."""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIX = {
    "": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?\d+(?:\.\d+)?)([a-zA-Z]*)$")


def parse_quantity(text: str | int | float) -> Decimal:
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    return Decimal(match.group(1)) * _SUFFIX[match.group(2)]


def divide_round_up(value: Decimal, divisor: Decimal) -> int:
    """The Downward API's resourceFieldRef rounds the quotient up to an integer (at least 1 for non-zero)."""
    quotient = value / divisor
    whole = int(quotient)
    return whole + 1 if quotient > whole else whole
