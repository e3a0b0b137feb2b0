"""The worker image's Dockerfile without building it: lint-clean, non-root with the manifests' uid, and the
tested releases. tests/image/ builds it with podman and runs it.
"""

import json
import re
import subprocess
from importlib.metadata import version

from generator.resources import default_values_path
from tests.conftest import BIN, ROOT

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


def pinned_releases() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    # a pin's environment marker (after ";") is not part of its version
    return dict(line.split(";")[0].strip().split("==") for line in lines if line and not line.startswith("#"))


def test_this_environment_runs_the_releases_every_install_pins():
    """.ci/run, the scripts and the Dockerfile install with constraints.txt: what runs here is what it pins."""
    pins = pinned_releases()
    assert {"torch", "torchvision"} <= pins.keys()
    assert {name: version(name).split("+")[0] for name in pins} == pins


def test_the_dependency_layer_comes_before_the_sources():
    """A code change rebuilds the package layer only, never the gigabytes of the pinned releases."""
    lines = DOCKERFILE.splitlines()
    pinned = next(i for i, line in enumerate(lines) if "--requirement constraints.txt" in line)
    first_source = next(i for i, line in enumerate(lines) if line.startswith("COPY worker"))
    assert pinned < first_source
