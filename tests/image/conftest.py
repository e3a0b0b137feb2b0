"""The worker image, built once per session from this checkout's Dockerfile with podman on a local base."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.image.podman import Podman, install

IMAGE = "localhost/indexed-trainer/worker:test"
# Kept between runs on one machine (base image, wheels), like a builder's cache; a fresh machine makes them.
STATE = Path(os.environ.get("IMAGE_TEST_STATE", "/var/tmp/indexed-trainer-image-tests"))


def say(message: str) -> None:
    print(f"image tests: {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def podman():
    reason = install()
    podman = None if reason else Podman(STATE)
    reason = reason or podman.works()
    if reason:
        if os.environ.get("CI") == "true":  # .ci/run's machine can install podman: CI must not skip silently
            pytest.fail(reason)
        pytest.skip(reason)
    return podman


def build_context(directory: Path) -> Path:
    """The checkout's files as git sees them (tracked, and untracked but not ignored), plus wheels/ filled
    with the tested releases from this machine's package sources: the build then needs no network."""
    shutil.rmtree(directory, ignore_errors=True)
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, directory / name)
    wheelhouse = STATE / "wheelhouse"
    say(f"pip download the tested releases (constraints.txt) into {wheelhouse}")
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheelhouse),
                    "--requirement", str(ROOT / "constraints.txt"), "setuptools>=77", "wheel"],
                   check=True, capture_output=True, timeout=1200)
    for wheel in wheelhouse.glob("*.whl"):
        os.link(wheel, directory / "wheels" / wheel.name)
    return directory


@pytest.fixture(scope="session")
def image(podman):
    base = podman.base_image()
    context = build_context(STATE / "context")
    say(f"podman build on {base} (the dependency layer is cached between runs; first build: minutes)")
    started = time.monotonic()
    result = podman("build", "--build-arg", f"PYTHON_IMAGE={base}", "--tag", IMAGE, str(context), timeout=2400,
                    check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    say(f"built {IMAGE} in {time.monotonic() - started:.0f} s")
    return IMAGE
