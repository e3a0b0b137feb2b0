"""Kubernetes resource quantities ("500m", "2", "4Gi") as numbers."""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10), "Mi": Decimal(2**20),
    "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50), "Ei": Decimal(2**60),
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
