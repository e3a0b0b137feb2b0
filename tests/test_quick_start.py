"""The README's quick start from a fresh clone, as CI runs it: `./prepare.sh && ./run.sh --local`.

The clone holds what is committed. Without network access (CI, this machine) the worker cannot download MNIST
and trains on the sample it ships, saying so in one line; with network it trains on the full set."""

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import BIN, ROOT

pytestmark = pytest.mark.slow


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_the_quick_start_trains_from_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    # the environment the README's first command would create is this one: put it first on PATH
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("BUILD_DIR", None)
    env.pop("LOCAL_JOB_ALLOW_ROOT", None)  # what a user's shell has: run.sh itself decides, as root too
    result = subprocess.run(["bash", "-c", "./prepare.sh && ./run.sh --local"], cwd=clone, env=env,
                            capture_output=True, text=True, timeout=900)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    output = clone / "runs" / "mnist-train" / "volumes" / "mnist-train-data" / "runs" / "mnist-train"
    summary = json.loads((output / "model.json").read_text())
    assert summary["accuracy"] >= 0.95 and (output / "model.pt").exists()
    if summary["data"] == "mnist-sample":
        assert log.count("training on the MNIST sample shipped with the worker") == 1
    assert "Rank 0: training completed." in log
    if os.geteuid() == 0:  # as uid 10001 where it can reach the Python, else as root (--allow-root): said either way
        assert re.search(r"^local-job: the pods run as (uid 10001, gid 10001|root \(--allow-root\): uid 10001 )", log,
                         re.M), log[:3000]
