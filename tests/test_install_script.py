"""scripts/install.sh, the one installer of .ci/run, prepare.sh/run.sh, the Dockerfile and the Slurm nodes."""

import subprocess
import sys

import pytest

from tests.conftest import OUTSIDE, ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    return venv / "bin" / "python"


def install(python, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "scripts" / "install.sh"), str(python), *args], capture_output=True,
                          text=True, timeout=900, cwd=OUTSIDE, env={"PATH": "/usr/bin:/bin", **env})


def test_the_worker_resolves_to_the_pinned_torch_and_says_where_it_comes_from(fresh_venv, built_wheel):
    # An index that does not answer: the registry's build, said in one line, at the pinned version.
    result = install(fresh_venv, "--dry-run", f"{built_wheel}[worker]", TORCH_INDEX_URL="http://127.0.0.1:9/simple")
    assert result.returncode == 0, result.stderr[-3000:]
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert "http://127.0.0.1:9/simple does not answer: taking PyTorch from the package registry" in result.stderr
    assert f"installing PyTorch {pins['torch']} from the package registry" in result.stderr
    would = result.stdout.split("Would install", 1)[1].split()
    assert f"torch-{pins['torch']}" in would and f"torchvision-{pins['torchvision']}" in would


def test_the_generator_alone_installs_without_torch(fresh_venv, built_wheel):
    result = install(fresh_venv, str(built_wheel))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PyTorch" not in result.stderr and "with the tested releases of" in result.stderr
    check = subprocess.run([str(fresh_venv.parent / "gen-manifests"), "--set", "replicas=3"], capture_output=True,
                           text=True, timeout=60, cwd=OUTSIDE)
    assert check.returncode == 0 and "completions: 3" in check.stdout
    assert subprocess.run([str(fresh_venv), "-c", "import torch"], capture_output=True).returncode != 0
