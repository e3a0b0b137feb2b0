"""Shared test helpers: paths, and running the real console scripts of this checkout's environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SHARED_MNIST = ROOT.parent / "shared" / "data" / "mnist-test-set"


def run_tool(name: str, *args: str, input: bytes | None = None, env: dict | None = None, timeout: float = 120,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a console script (gen-manifests, local-job) from the test interpreter's environment."""
    return subprocess.run(
        [str(BIN / name), *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd or ROOT,
    )


@pytest.fixture
def gen():
    def _gen(*args: str, **kwargs) -> subprocess.CompletedProcess:
        return run_tool("gen-manifests", *args, **kwargs)

    return _gen
