"""Kubernetes resource quantities, one definition for every room that reads or writes one: the generator writes
them from the values' plain numbers (cores, GiB) and names one a user wrote where a number belongs; local-job
reads the container's limits and the Downward API's divisors.

The grammar is the API server's (k8s.io/apimachinery resource.ParseQuantity): an optionally signed decimal
number (``5``, ``0.5``, ``.5``, ``5.``) and one suffix: binary (Ki … Ei), decimal (n, u, m, none, k, M, G, T, P,
E) or a decimal exponent (``e3``, ``E-2``). ``K`` is no suffix (the API refuses ``4K``)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$")
_UNITS = {"GiB": Decimal(2) ** 30, "cores": Decimal(1)}  # the values' units (x-unit in the schema)


def parse_quantity(text: str | int | float) -> Decimal:
    """The quantity's exact value (``"500m"`` -> 0.5, ``"4Gi"`` -> 4294967296); ValueError if it is none."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = Decimal(match.group(1)), match.group(2)
    if suffix in BINARY:
        return number * Decimal(1024) ** BINARY[suffix]
    try:
        exponent = int(suffix[1:]) if len(suffix) > 1 and suffix[0] in "eE" else DECIMAL[suffix]
        return number.scaleb(exponent)
    except (InvalidOperation, OverflowError, ValueError):
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None


def quantity_in(unit: str, text: str) -> float | None:
    """A quantity (``4Gi``, ``512Mi``, ``500m``) in one of the values' units (GiB, cores), rounded for a message;
    None if the text is no quantity or the unit is not one of them."""
    if unit not in _UNITS:
        return None
    try:
        return round(float(parse_quantity(text) / _UNITS[unit]), 4)
    except ValueError:
        return None


def divide_round_up(value: Decimal, divisor: Decimal) -> int:
    """The Downward API's resourceFieldRef rounds the quotient up to an integer (at least 1 for non-zero)."""
    quotient = value / divisor
    whole = int(quotient)
    return whole + 1 if quotient > whole else whole


def cpu_quantity(cores: float) -> str:
    """2 -> "2", 0.5 -> "500m", 1.25 -> "1250m" (millicores are the finest unit Kubernetes keeps)."""
    millicores = round(cores * 1000)
    if millicores < 1:
        raise ValueError(f"{cores} CPU is below one millicore")
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def gib_quantity(gib: float) -> str:
    """4 -> "4Gi", 0.5 -> "512Mi"; sizes are rounded to whole MiB."""
    mib = round(gib * 1024)
    if mib < 1:
        raise ValueError(f"{gib} GiB is below one MiB")
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"
