"""The usage log (trainer_runtime/usage_log.py): a line every interval from a thread, CPU and resident memory without
GPUs, nvidia-smi's figures per GPU with them, appended across restarts."""

from __future__ import annotations

import re
import subprocess
import time

from trainer_runtime import usage_log

CPU_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ rank 0 cpu (\d+)% rss (\d+) MiB peak (\d+) MiB$")


def test_without_gpus_each_line_says_cpu_and_resident_memory_and_a_restart_appends(tmp_path):
    path = tmp_path / "logs" / "usage.log"
    before = usage_log.resident_mib()
    ballast = b"\x01" * (64 << 20)  # written, so resident while the lines are written
    log = usage_log.UsageLog(path, "rank 0", every=0.1, gpus=lambda: None).start()
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # busy: the CPU figure must show it
        sum(range(10_000))
    log.stop()
    lines = path.read_text().splitlines()
    assert len(lines) >= 3, lines
    figures = [CPU_LINE.match(line) for line in lines]
    assert all(figures), lines
    assert max(int(match.group(1)) for match in figures if match) >= 50  # one core busy most of the time
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
