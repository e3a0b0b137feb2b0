"""The worker image, built once per session from this checkout's Dockerfile with podman, as users build it:
`podman build .` in a directory laid out like a checkout, no --build-arg, the Dockerfile's own base image name
(here the debootstrapped base under that name: no registry is reachable)."""

from __future__ import annotations

import os
import re
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


def default_python_image() -> str:
    """The Dockerfile's default PYTHON_IMAGE: what `docker build .` builds on."""
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert match, "the Dockerfile has no ARG PYTHON_IMAGE=... default"
    return match.group(1)


@pytest.fixture(scope="session")
def python_image(podman) -> str:
    """The Dockerfile's default base image, stood in for by the debootstrapped one under the same name: podman
    and buildah take a local image without pulling it (pull policy "missing"), so the Dockerfile builds with
    no --build-arg, as a user types it. (On this machine the name is the test base, whatever it was.)"""
    name = default_python_image()
    podman("tag", podman.base_image(), name)
    return name


# What a working checkout holds beside its files and the build must not read or send (.dockerignore): a
# virtual environment and a local run's outputs, sparse files of this many bytes each.
UNTRACKED_BULK = {".venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so": 300 << 20,
                  "runs/local/checkpoints/ckpt-e0005-s000000.pt": 100 << 20}


def build_context(directory: Path) -> Path:
    """A directory laid out like a user's checkout: its files as git sees them (tracked, and untracked but not
    ignored), wheels/ filled with the tested releases from this machine's package sources (the build then needs
    no network; wheels/README.md), and a .venv/ and runs/ of some hundred MB (UNTRACKED_BULK)."""
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
    for name, size in UNTRACKED_BULK.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        with open(directory / name, "wb") as bulk:
            bulk.truncate(size)
    return directory


@pytest.fixture(scope="session")
def checkout() -> Path:
    """The session's user-like checkout (build_context); the image is built in it."""
    return build_context(STATE / "checkout")


@pytest.fixture(scope="session")
def image(podman, python_image, checkout):
    """`podman build --tag IMAGE .` in the checkout: the README's command with the tests' tag."""
    say(f"podman build in {checkout} on {python_image} (the dependency layer is cached between runs; first "
        "build: minutes)")
    started = time.monotonic()
    result = podman("build", "--tag", IMAGE, ".", cwd=checkout, timeout=2400, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    say(f"built {IMAGE} in {time.monotonic() - started:.0f} s")
    return IMAGE
