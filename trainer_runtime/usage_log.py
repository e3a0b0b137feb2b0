"""The seeds' usage log (their gpu_usage.log): one line every few seconds from a thread beside the training, so
that a user can see what the hardware is doing without a dashboard. Per GPU (nvidia-smi's utilization and
memory) where nvidia-smi answers, else this process's CPU (percent of one core, every thread); this process's
resident memory with its peak; where the process trains on CUDA, its peak CUDA memory allocated (``cuda peak N
MiB``); a last line when it stops. Appends, so that a restarted run's lines follow the first's. Torch-free: torch
is read only where the program has imported it."""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

MIB = 1 << 20
CUDA_PEAK = re.compile(r"\bcuda peak (\d+) MiB")
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


def cuda_peak_mib(device: int | None) -> float | None:
    """The peak CUDA memory allocated on ``device`` by this process so far (torch's caching allocator, MiB); None
    without a device, where torch is not imported or CUDA not initialised (a run on the CPU)."""
    torch = sys.modules.get("torch")  # never imported here: the log must not load torch into a program without it
    if device is None or torch is None or not torch.cuda.is_initialized() or device >= torch.cuda.device_count():
        return None
    return torch.cuda.max_memory_allocated(device) / MIB


def cuda_peak_of(line: str) -> float | None:
    """The peak CUDA memory (MiB) a line of this log gives; None for a line of a run on the CPU."""
    found = CUDA_PEAK.search(line)
    return None if found is None else float(found.group(1))


class UsageLog:
    """``cuda_device``: the CUDA device this process trains on when it does (its local rank), whose peak each
    line gives; the log's thread cannot ask torch for the current device, which is the training thread's own."""

    def __init__(self, path: Path, label: str, every: float = 5.0,
                 gpus: Callable[[], list[str] | None] = gpu_parts, cuda_device: int | None = None):
        self.path, self.label, self.every, self.gpus, self.cuda_device = path, label, every, gpus, cuda_device
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
        memory = f"rss {resident_mib():.0f} MiB peak {peak_mib():.0f} MiB"
        cuda_peak = cuda_peak_mib(self.cuda_device)
        cuda = [] if cuda_peak is None else [f"cuda peak {cuda_peak:.0f} MiB"]
        gpus = self.gpus()
        if gpus:  # the process's memory after the GPUs': its host memory still bounds what a node can run
            return f"{stamp} {self.label} " + "; ".join([*gpus, memory, *cuda])
        percent = 100.0 * (cpu - before) / max(now - then, 1e-6)
        return "; ".join([f"{stamp} {self.label} cpu {percent:.0f}% {memory}", *cuda])

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
