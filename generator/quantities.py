"""Kubernetes resource quantities from the values' plain numbers (cores, GiB)."""

from __future__ import annotations


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
