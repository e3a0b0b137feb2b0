"""ruff and mypy over the product's packages (generator/, worker/, localjob/): no finding passes CI.

Their settings are in pyproject.toml; their versions are pinned in setup.cfg's test extra.
"""

import subprocess

from tests.conftest import BIN, ROOT

PRODUCT = ("generator", "worker", "localjob")


def test_ruff_reports_nothing():
    result = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", *PRODUCT], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_reports_nothing(tmp_path):
    result = subprocess.run([str(BIN / "mypy"), "--cache-dir", str(tmp_path / "mypy-cache")], capture_output=True,
                            text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
