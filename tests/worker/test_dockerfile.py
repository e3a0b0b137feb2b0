"""The worker image's Dockerfile: lint-clean, non-root with the manifests' uid, and its command really trains.

There is no Docker engine on the project's machines, so the image is not built here; these tests hold the
Dockerfile to what can be checked without one, and run its ENTRYPOINT + CMD with its ENV as the container would.
"""

import json
import re
import shlex
import subprocess

import pytest
import torch
import torchvision

from generator.resources import default_values_path
from tests.conftest import BIN, ROOT
from tests.worker.launch import run, worker_env

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instruction(name: str) -> list[str]:
    """Every argument line of one instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(name + " ")]


def test_hadolint_reports_nothing():
    result = subprocess.run([str(BIN / "hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "", result.stdout


def test_runs_as_the_numeric_non_root_user_of_the_manifests():
    defaults = json.loads(default_values_path().read_text())["security"]
    user = instruction("USER")[-1]
    uid, gid = (int(part) for part in user.split(":"))
    assert uid != 0 and (uid, gid) == (defaults["run_as_user"], defaults["run_as_group"])


def test_entrypoint_and_cmd_are_exec_form_with_the_launcher_as_pid_1():
    assert json.loads(instruction("ENTRYPOINT")[-1]) == ["python", "-m", "worker.launch"]
    assert json.loads(instruction("CMD")[-1]) == ["--standalone", "-m", "worker"]


def test_pins_the_torch_the_tests_run_with():
    line = instruction("RUN")[0]
    assert f'"torch=={torch.__version__.split("+")[0]}"' in line
    assert f'"torchvision=={torchvision.__version__.split("+")[0]}"' in line


def image_env(pvc_home) -> dict:
    env = {}
    for item in shlex.split(" ".join(instruction("ENV"))):
        key, _, value = item.partition("=")
        env[key] = value.replace("/pvc-home", str(pvc_home))
    env.pop("PATH")
    env.pop("HOME")
    return env


@pytest.mark.slow
def test_the_image_command_trains_with_the_image_environment(small_dir, tmp_path):
    """`docker run --rm -v DIR:/pvc-home -e PET_NPROC_PER_NODE=2 IMAGE`, without Docker."""
    pvc_home = tmp_path / "pvc-home"
    (pvc_home / "data").mkdir(parents=True)
    (pvc_home / "data" / "MNIST").symlink_to(small_dir / "MNIST")
    env = {**worker_env(pvc_home / "data", pvc_home / "runs" / "local"), **image_env(pvc_home),
           "PET_NPROC_PER_NODE": "2", "EPOCHS": "1"}
    command = [str(BIN / "python"), *json.loads(instruction("ENTRYPOINT")[-1])[1:], *json.loads(instruction("CMD")[-1])]
    result = run(command, env, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Rank 1: training completed." in result.stdout
    assert (pvc_home / "runs" / "local" / "model.pt").exists()
