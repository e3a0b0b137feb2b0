"""The usage log (trainer_runtime/usage_log.py): a line every interval from a thread, CPU and resident memory without
GPUs, nvidia-smi's figures per GPU with them, appended across restarts."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import types

from trainer_runtime import usage_log

CPU_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ rank 0 cpu (\d+)% rss (\d+) MiB peak (\d+) MiB$")


def test_without_gpus_each_line_says_cpu_and_resident_memory_and_a_restart_appends(tmp_path):
    path = tmp_path / "logs" / "usage.log"
    before = usage_log.resident_mib()
    ballast = b"\x01" * (64 << 20)  # written, so resident while the lines are written
    log = usage_log.UsageLog(path, "rank 0", every=0.1, gpus=lambda: None).start()
    started, cpu_started = time.monotonic(), time.process_time()
    while time.monotonic() < started + 0.6:  # busy: the CPU figure must show it
        sum(range(10_000))
    # the share of a core the machine gave this process: all of one alone, less beside other work (CI's fast tier)
    busy = 100 * (time.process_time() - cpu_started) / (time.monotonic() - started)
    log.stop()
    lines = path.read_text().splitlines()
    assert len(lines) >= 3, lines
    figures = [CPU_LINE.match(line) for line in lines]
    assert all(figures), lines
    assert busy > 0 and max(int(match.group(1)) for match in figures if match) >= 0.6 * busy, (busy, lines)
    assert min(int(match.group(2)) for match in figures if match) >= before + 60
    assert all(int(match.group(3)) >= int(match.group(2)) - 1 for match in figures if match)  # the peak bounds it
    assert len(ballast) == 64 << 20
    usage_log.UsageLog(path, "rank 0", every=60, gpus=lambda: None).start().stop()
    again = path.read_text().splitlines()
    assert again[:len(lines)] == lines and len(again) == len(lines) + 1  # appended, never rewritten
    assert CPU_LINE.match(again[-1])  # a run shorter than the interval still has its line, written as it stops


def test_gpus_are_read_from_nvidia_smis_csv_and_a_failing_nvidia_smi_means_none(monkeypatch):
    monkeypatch.setattr(usage_log.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def answer(stdout: str, code: int = 0):
        return lambda command, **_: subprocess.CompletedProcess(command, code, stdout=stdout, stderr="")

    assert usage_log.gpu_parts(answer("0, 87, 10234, 81559\n1, 3, 512, 81559\n")) == [
        "gpu 0 util 87% mem 10234/81559 MiB", "gpu 1 util 3% mem 512/81559 MiB"]
    assert usage_log.gpu_parts(answer("", code=9)) is None  # no driver: the CPU line instead
    monkeypatch.setattr(usage_log.shutil, "which", lambda name: None)
    assert usage_log.gpu_parts(answer("0, 1, 2, 3\n")) is None


class FakeCuda:
    """torch.cuda as a process on two GPUs sees it, having allocated at most 300 MiB on device 1."""
    initialized = True

    @classmethod
    def is_initialized(cls) -> bool:
        return cls.initialized

    @staticmethod
    def device_count() -> int:
        return 2

    @staticmethod
    def max_memory_allocated(device: int) -> int:
        return {0: 0, 1: 300 << 20}[device]


def test_a_process_on_cuda_logs_its_peak_cuda_memory_and_a_process_on_the_cpu_does_not(monkeypatch, tmp_path):
    import torch  # the real one first: on this machine CUDA is never initialised, so there is no peak to give

    assert not torch.cuda.is_initialized() and usage_log.cuda_peak_mib(0) is None
    cpu_line = usage_log.UsageLog(tmp_path / "cpu.log", "rank 0", gpus=lambda: None, cuda_device=0).line()
    assert CPU_LINE.match(cpu_line) and usage_log.cuda_peak_of(cpu_line) is None  # the line as it always was

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=FakeCuda))
    with_gpus = usage_log.UsageLog(tmp_path / "gpu.log", "rank 1", gpus=lambda: ["gpu 1 util 87% mem 10234/81559 MiB"],
                                   cuda_device=1).line()
    assert re.search(r" rank 1 gpu 1 util 87% mem 10234/81559 MiB; rss \d+ MiB peak \d+ MiB; cuda peak 300 MiB$",
                     with_gpus), with_gpus
    assert usage_log.cuda_peak_of(with_gpus) == 300
    without_smi = usage_log.UsageLog(tmp_path / "gpu.log", "rank 1", gpus=lambda: None, cuda_device=1).line()
    assert re.search(r" rank 1 cpu \d+% rss \d+ MiB peak \d+ MiB; cuda peak 300 MiB$", without_smi), without_smi
    assert usage_log.cuda_peak_mib(None) is None  # no device given: the log's default
    assert usage_log.cuda_peak_mib(2) is None  # a local rank past the devices trains on the CPU
    monkeypatch.setattr(FakeCuda, "initialized", False)
    assert usage_log.cuda_peak_mib(1) is None
