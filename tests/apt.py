"""Installing Debian packages the tests need (Slurm, podman) where they are missing, as root."""

from __future__ import annotations

import os
import shutil
import subprocess

# apt-get's one run's bound: a cold machine downloads podman's or Slurm's packages and their dependencies
APT_TIMEOUT = 900


def install(packages: tuple[str, ...], tools: tuple[str, ...]) -> str | None:
    """apt-get install ``packages`` unless every one of ``tools`` is on PATH; None, or why it could not be done."""
    if all(shutil.which(tool) for tool in tools):
        return None
    if os.geteuid() != 0:
        return f"{', '.join(tools)} missing, and this user cannot apt-get install {' '.join(packages)}"
    command = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(command, capture_output=True, env=env, timeout=APT_TIMEOUT).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=APT_TIMEOUT)
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=APT_TIMEOUT)
        if result.returncode != 0:
            return f"apt-get install {' '.join(packages)} failed: {result.stderr[-500:]}"
    return None
