"""podman on this machine for the image tests: installed where missing, configured, with a local base image.

No image registry is reachable and Docker's engine is absent: the tests build the Dockerfile with podman
(Debian's packages) on a base image made by debootstrap (make_base_image.sh). Measured facts of this kind of
machine, kept in one place: crun cannot start containers (cgroups in hybrid mode) but runc can, with the
cgroupfs manager; podman's default ulimits are refused, explicit ones are not.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests import apt

PACKAGES = ("podman", "buildah", "runc", "debootstrap", "uidmap")
TOOLS = ("podman", "buildah", "runc", "debootstrap")
BASE_IMAGE = "localhost/indexed-trainer-test-base:bookworm"
BASE_IMAGE_TIMEOUT = 1200  # debootstrap of bookworm with python3 from Debian's mirror: a few minutes cold
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def install() -> str | None:
    """Install podman and its helpers where missing; None, or why they cannot be had."""
    return apt.install(PACKAGES, TOOLS)


class Podman:
    """podman with this project's containers.conf (in ``state``, not /etc: the machine's settings stay)."""

    def __init__(self, state: Path):
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        conf = state / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def __call__(self, *args: str, timeout: float = 600, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, env=self.env,
                                **kwargs)
        if check and result.returncode != 0:
            raise AssertionError(f"podman {' '.join(args[:3])} ... exited {result.returncode}:\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def works(self) -> str | None:
        """None when a container runs, else podman's reason."""
        result = self("info", check=False, timeout=120)
        return None if result.returncode == 0 else f"podman info failed: {result.stderr[-800:]}"

    def base_image(self) -> str:
        """The debootstrapped Debian bookworm with python3, made once per machine (a few minutes)."""
        if self("image", "exists", BASE_IMAGE, check=False).returncode != 0:
            script = Path(__file__).with_name("make_base_image.sh")
            result = subprocess.run([str(script), BASE_IMAGE, str(self.state / "base")], capture_output=True,
                                    text=True, timeout=BASE_IMAGE_TIMEOUT, env=self.env)
            assert result.returncode == 0, result.stderr[-3000:]
        return BASE_IMAGE

    def exit_code(self, container: str) -> int:
        """A container's exit code, read from podman itself (the docker CLI's `run --rm` through podman's
        socket returns 0 whatever the container's code: a podman bug)."""
        return int(self("inspect", "--format", "{{.State.ExitCode}}", container).stdout.strip())
