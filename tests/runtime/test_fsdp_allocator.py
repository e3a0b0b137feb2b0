"""trainer_runtime.strategies.fsdp.unmap_large_buffers_when_freed: buffers of a transformer block's size that are
freed between small live ones leave the resident set, where glibc's default keeps them once a larger buffer was
freed before (FSDP's gathered parameters and gradients at every step). Each case in a fresh process: the setting
is process-wide."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tests.conftest import OUTSIDE

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="a glibc setting")

BUFFERS, BUFFER_MIB = 16, 4

# Prints the MiB of resident memory the freeing of BUFFERS buffers of BUFFER_MIB gave back.
FREE_BETWEEN_LIVE_ONES = f"""
import os, sys
import torch
from trainer_runtime.strategies.fsdp import unmap_large_buffers_when_freed

def resident_mib():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

if sys.argv[1] == "unmapped":
    assert unmap_large_buffers_when_freed()
torch.ones(8 << 18)  # 8 MiB, freed at once: glibc's own threshold rises above the buffers below
large, small = [], []
for _ in range({BUFFERS}):
    large.append(torch.ones({BUFFER_MIB} << 18))
    small.append(torch.ones(64 << 10))  # 256 KiB kept after each (too large for the heap's old holes)
before = resident_mib()
del large
print(before - resident_mib())
"""


def released_mib(case: str) -> float:
    result = subprocess.run([sys.executable, "-c", FREE_BETWEEN_LIVE_ONES, case], capture_output=True, text=True,
                            timeout=300, cwd=OUTSIDE)
    assert result.returncode == 0, result.stderr[-2000:]
    return float(result.stdout.split()[-1])


def test_freed_block_sized_buffers_leave_the_resident_set():
    assert released_mib("unmapped") >= 0.9 * BUFFERS * BUFFER_MIB


def test_without_it_the_same_frees_stay_resident():
    # the case the setting exists for: were it glibc's default behaviour, the test above would prove nothing
    assert released_mib("default") <= 0.25 * BUFFERS * BUFFER_MIB
