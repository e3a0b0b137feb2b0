"""The realnode tier's one node, started once for the session (node.py), and the worker image the image tier
builds (tests/image's fixtures, rebuilt from its cache where needed) imported into its containerd once.

Skipped with one line naming what is missing: the Kubernetes binaries, root, a Debian package (under CI=true a
missing package fails instead: .ci/run installs them)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.image.conftest import checkout, image, podman, python_image  # noqa: F401 - the image tier's
from tests.kube_binaries import CONTROL_PLANE, NODE, binaries
from tests.long_setup import long_setup
from tests.realnode.node import IMPORT_TIMEOUT, STATE, RealNode, missing_packages


def say(message: str) -> None:
    print(f"realnode: {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def node():
    if os.geteuid() != 0:
        pytest.skip("the realnode tier runs a kubelet and containerd: it needs root")
    assets, why_not = binaries(CONTROL_PLANE + NODE)  # first: without ../shared/k8s, CI installs no package
    if assets is None:
        pytest.skip(why_not)
    absent = missing_packages()
    if absent:
        reason = f"the realnode tier needs the Debian packages {' '.join(absent)} (apt-get install them)"
        if os.environ.get("CI") == "true":  # .ci/run's machine installs them: CI must not skip silently
            pytest.fail(reason)
        pytest.skip(reason)
    real = RealNode(assets)
    started = time.monotonic()
    try:
        real.start()
        say(f"node Ready in {time.monotonic() - started:.1f} s (state under {STATE})")
        yield real
    finally:
        started = time.monotonic()
        try:
            real.stop()
        finally:
            steps = ", ".join(f"{name} {seconds:.1f}" for name, seconds in real.stop_times if seconds >= 0.5)
            say(f"node stopped in {time.monotonic() - started:.1f} s ({steps})")


@pytest.fixture(scope="session")
def worker_image(node, podman, image, request) -> str:  # noqa: F811 - the image tier's fixtures
    """The image tier's worker image in the node's containerd (imported once: 6.5 GB; kept between runs)."""
    image_id = podman("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    with long_setup(request, f"realnode: {image} into containerd (podman save | ctr import, unless it holds it)",
                    IMPORT_TIMEOUT):
        node.import_image(image, image_id, ["podman", "save", "--format", "docker-archive", image], env=podman.env)
    return image


@pytest.fixture
def namespace(node, request):
    """A namespace of the test's own, deleted afterwards (the next test waits for its pods to be gone: the node
    holds one job at a time) with its volume; its directory (values, volume) under STATE/jobs/<namespace>."""
    test, _, case = request.node.name.removeprefix("test_").rstrip("]").partition("[")
    name = test.replace("_", "-")[:40 - len(case) - 1 if case else 40].rstrip("-") + (f"-{case}" if case else "")
    node.kubectl("create", "namespace", name)
    workdir = STATE / "jobs" / name
    workdir.mkdir(parents=True, exist_ok=True)
    yield name, workdir
    node.kubectl("delete", "namespace", name, "--wait=false")
    node.kubectl("delete", "persistentvolume", f"{name}-data", "--wait=false", check=False)
    deadline = time.monotonic() + 120  # its pods gone, the node's CPUs are free for the next job
    while node.kubectl("-n", name, "get", "pods", "-o", "name", check=False).stdout.strip():
        assert time.monotonic() < deadline, f"namespace {name}'s pods still there 120 s after its deletion"
        time.sleep(0.5)
