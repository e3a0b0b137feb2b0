"""The worker image, built once per session from this checkout's Dockerfile with podman, as users build it:
`podman build .` in a directory laid out like a checkout, no --build-arg, the Dockerfile's own base image name
(here the debootstrapped base under that name: no registry is reachable)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apt import APT_TIMEOUT
from tests.conftest import ROOT
from tests.image.podman import BASE_IMAGE_TIMEOUT, PACKAGES, Podman, install
from tests.long_setup import long_setup

IMAGE = "localhost/indexed-trainer/worker:test"
# Each long step's own bound: what it takes on a cold machine (docs/contributing.md), with room for a busy one.
WHEELHOUSE_TIMEOUT = 1800  # ~3.5 GB of wheels (the registry's CUDA build of torch and its libraries)
BUILD_TIMEOUT = 2400  # a venv of ~6 GB installed from them, then the package's layers
# Kept between runs on one machine (base image, wheels), like a builder's cache; a fresh machine makes them.
STATE = Path(os.environ.get("IMAGE_TEST_STATE", "/var/tmp/indexed-trainer-image-tests"))


@pytest.fixture(scope="session")
def podman(request):
    with long_setup(request, f"image tests: apt-get install {' '.join(PACKAGES)} where missing", 3 * APT_TIMEOUT):
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
def python_image(podman, request) -> str:
    """The Dockerfile's default base image, stood in for by the debootstrapped one under the same name: podman
    and buildah take a local image without pulling it (pull policy "missing"), so the Dockerfile builds with
    no --build-arg, as a user types it. (On this machine the name is the test base, whatever it was.)"""
    name = default_python_image()
    with long_setup(request, "image tests: the debootstrapped base image (once per machine)", BASE_IMAGE_TIMEOUT):
        base = podman.base_image()
    podman("tag", base, name)
    return name


# What a working checkout holds beside its files and the build must not read or send (.dockerignore): a
# virtual environment and a local run's outputs, sparse files of this many bytes each.
UNTRACKED_BULK = {".venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so": 300 << 20,
                  "runs/local/checkpoints/ckpt-e0005-s000000.pt": 100 << 20}


def build_context(directory: Path, request: pytest.FixtureRequest) -> Path:
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
    with long_setup(request, f"image tests: pip download the tested releases (constraints.txt) into {wheelhouse}",
                    WHEELHOUSE_TIMEOUT):
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheelhouse),
                        "--requirement", str(ROOT / "constraints.txt"), "setuptools>=77", "wheel"],
                       check=True, capture_output=True, timeout=WHEELHOUSE_TIMEOUT)
    for wheel in wheelhouse.glob("*.whl"):
        os.link(wheel, directory / "wheels" / wheel.name)
    for name, size in UNTRACKED_BULK.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        with open(directory / name, "wb") as bulk:
            bulk.truncate(size)
    return directory


# Untagged layers (earlier builds' caches) older than this are pruned before the session's build.
STALE_LAYERS_HOURS = 24


@pytest.fixture(scope="session")
def checkout(request) -> Path:
    """The session's user-like checkout (build_context); the image is built in it."""
    return build_context(STATE / "checkout", request)


@pytest.fixture(scope="session")
def image(podman, python_image, checkout, request):
    """`podman build --tag IMAGE .` in the checkout: the README's command with the tests' tag. Before it, the
    untagged layers of builds older than a day go (each change of constraints.txt leaves a dependency layer of
    gigabytes per image format behind, and a machine's disk fills in a few); a day's keep the cache."""
    podman("image", "prune", "--force", "--filter", f"until={STALE_LAYERS_HOURS}h", check=False, timeout=600)
    with long_setup(request, f"image tests: podman build {IMAGE} in {checkout} on {python_image} (the dependency "
                    "layer is cached between runs)", BUILD_TIMEOUT):
        result = podman("build", "--tag", IMAGE, ".", cwd=checkout, timeout=BUILD_TIMEOUT, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return IMAGE
