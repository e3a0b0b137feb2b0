"""Evicting a pod of a running local-job from another terminal, as `kubectl drain` or a preemption would.

    local-job build/ --volume-root runs/job            # terminal 1: the Job runs
    local-job evict --volume-root runs/job 1           # terminal 2: pod 1 gets DisruptionTarget and SIGTERM

The running local-job owns ``VOLUME_ROOT/control/``: its PID in ``controller.pid``; a request is a file
``evict-<index>.request``, which the controller answers with ``evict-<index>.answer`` (JSON) and removes.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from trainer_contract.atomic import atomic_write

_REQUEST = re.compile(r"^evict-(\d+)\.request$")


class EvictionError(Exception):
    """The eviction could not be asked for (no local-job there), or was ``refused`` by it; the message says why."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


class ControlDirectory:
    """The controller's side: announce itself, list requests, answer them."""

    def __init__(self, root: Path):
        self.directory = root / "control"

    def open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob("evict-*"):
            stale.unlink(missing_ok=True)
        atomic_write(self.directory / "controller.pid", f"{os.getpid()}\n".encode())

    def close(self) -> None:
        (self.directory / "controller.pid").unlink(missing_ok=True)

    def eviction_requests(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(int(m.group(1)) for m in map(_REQUEST.match, names) if m)

    def answer(self, index: int, evicted: bool, message: str) -> None:
        atomic_write(self.directory / f"evict-{index}.answer", json.dumps({"evicted": evicted, "message": message}).encode())
        (self.directory / f"evict-{index}.request").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_controller(root: Path) -> int | None:
    """The PID of the local-job running with ``--volume-root root``, or None when none runs there."""
    try:
        pid = int((root / "control" / "controller.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def request_eviction(root: Path, index: int, timeout: float = 30.0) -> str:
    """Ask the local-job running with ``--volume-root root`` to evict index's pod; its answer, or EvictionError."""
    directory = root / "control"
    try:
        pid = int((directory / "controller.pid").read_text())
    except (OSError, ValueError):
        raise EvictionError(f"no local-job is running with --volume-root {root} (no {directory}/controller.pid)") from None
    if not _alive(pid):
        raise EvictionError(f"the local-job that used --volume-root {root} (pid {pid}) is no longer running")
    answer = directory / f"evict-{index}.answer"
    answer.unlink(missing_ok=True)
    atomic_write(directory / f"evict-{index}.request", f"{time.time()}\n".encode())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer.exists():
            reply = json.loads(answer.read_text())
            answer.unlink(missing_ok=True)
            if not reply["evicted"]:
                raise EvictionError(reply["message"], refused=True)
            return reply["message"]
        if not _alive(pid):
            break
        time.sleep(0.05)
    (directory / f"evict-{index}.request").unlink(missing_ok=True)
    raise EvictionError(f"the local-job (pid {pid}) did not answer within {timeout:g} s")
