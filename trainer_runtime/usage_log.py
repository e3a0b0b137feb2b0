"""The seeds' usage log (their gpu_usage.log): one line every few seconds from a thread beside the training, so
that a user can see what the hardware is doing without a dashboard. Per GPU (nvidia-smi's utilization and
memory) where nvidia-smi answers; this process's CPU (percent of one core, every thread) and resident memory
otherwise, with its peak; a last line when it stops. Appends, so that a restarted run's lines follow the first's. Torch-free."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

MIB = 1 << 20
NVIDIA_SMI = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total",
              "--format=csv,noheader,nounits"]


def gpu_parts(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[str] | None:
    """``gpu I util U% mem USED/TOTAL MiB`` for each GPU nvidia-smi lists; None where it is absent or fails."""
    if shutil.which(NVIDIA_SMI[0]) is None:
        return None
    try:
        answer = run(NVIDIA_SMI, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if answer.returncode != 0:
        return None
    parts = []
    for row in answer.stdout.strip().splitlines():
        fields = [field.strip() for field in row.split(",")]
        if len(fields) == 4:
            index, utilization, used, total = fields
            parts.append(f"gpu {index} util {utilization}% mem {used}/{total} MiB")
    return parts or None


def resident_mib() -> float:
    """This process's resident memory now (/proc), or its peak where /proc is not there."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / MIB
    except (OSError, ValueError, IndexError):
        return peak_mib()


def peak_mib() -> float:
    """This process's peak resident memory so far (the kernel's high-water mark, between the samples too)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class UsageLog:
    def __init__(self, path: Path, label: str, every: float = 5.0,
                 gpus: Callable[[], list[str] | None] = gpu_parts):
        self.path, self.label, self.every, self.gpus = path, label, every, gpus
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="usage-log", daemon=True)
        self.last = (time.monotonic(), self._cpu_seconds())

    def start(self) -> UsageLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()

    def line(self) -> str:
        """What the hardware is doing since the previous line."""
        now, cpu = time.monotonic(), self._cpu_seconds()
        (then, before), self.last = self.last, (now, cpu)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        gpus = self.gpus()
        if gpus:
            return f"{stamp} {self.label} " + "; ".join(gpus)
        percent = 100.0 * (cpu - before) / max(now - then, 1e-6)
        return f"{stamp} {self.label} cpu {percent:.0f}% rss {resident_mib():.0f} MiB peak {peak_mib():.0f} MiB"

    def _run(self) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            while not self.stopping.wait(self.every):
                out.write(self.line() + "\n")
                out.flush()
            out.write(self.line() + "\n")  # the end's: a run shorter than the interval still has its line

    @staticmethod
    def _cpu_seconds() -> float:
        times = os.times()
        return times.user + times.system
