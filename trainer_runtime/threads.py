"""How many threads each process may use: never more, across the pod's processes, than its CPUs."""

from __future__ import annotations

import math
import os
from pathlib import Path


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this container in cores (cgroup v2 cpu.max, or v1 cfs quota), or None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    """CPUs this process may run on: its affinity mask, capped by the cgroup quota (rounded up)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


def threads_per_process(local_world_size: int, omp_num_threads: str | None) -> int:
    """OMP_NUM_THREADS if set (the pod's CPU limit), divided among the pod's processes and capped by the cores."""
    cores = usable_cores()
    wanted = cores
    if omp_num_threads:
        try:
            wanted = max(1, int(omp_num_threads))
        except ValueError:
            pass
    return max(1, min(wanted, cores) // max(1, local_world_size))
