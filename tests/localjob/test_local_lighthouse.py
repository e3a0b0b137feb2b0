"""localjob/lighthouse.py: the Lighthouse kept as its Deployment would keep it, and never outliving local-job, even
one killed with SIGKILL (no handler runs: the kernel ends it, PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.conftest import ROOT

KEEPER = """
import sys, threading
from pathlib import Path
from localjob.lighthouse import LocalLighthouse
lighthouse = LocalLighthouse("Deployment test", [sys.executable, "-c", "import time; time.sleep(120)"],
                             Path(sys.argv[1]), print)
lighthouse.start()
print(lighthouse.process.pid, flush=True)
threading.Event().wait()
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone but for its parent's wait
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_the_lighthouse_dies_with_a_local_job_killed_by_sigkill(tmp_path):
    keeper = subprocess.Popen([sys.executable, "-c", KEEPER, str(tmp_path / "lighthouse.log")], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        pid = int(keeper.stdout.readline())
        assert alive(pid)
        keeper.send_signal(signal.SIGKILL)
        keeper.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid), "the Lighthouse outlived local-job"
    finally:
        keeper.kill()
