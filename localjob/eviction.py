"""Evicting or deleting a pod of a running local-job from another terminal, as `kubectl drain` or a preemption
would (evict), or as `kubectl delete pod` would (delete).

    local-job build/ --volume-root runs/job            # terminal 1: the Job runs
    local-job evict --volume-root runs/job 1           # terminal 2: pod 1 gets DisruptionTarget and SIGTERM
    local-job delete --volume-root runs/job 0          # or: pod 0 gets SIGTERM alone (its failure may count)
    local-job scale --volume-root runs/job 4           # replica groups: completions and parallelism to 4

The running local-job owns ``VOLUME_ROOT/control/``: its PID in ``controller.pid``; a request is a file
``<evict|delete>-<index>.request`` (``scale-<count>.request``), which the controller answers with
``<kind>-<number>.answer`` (JSON) and removes.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from trainer_contract.atomic import atomic_write

EVICT, DELETE, SCALE = "evict", "delete", "scale"
_REQUEST = re.compile(rf"^({EVICT}|{DELETE}|{SCALE})-(\d+)\.request$")


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
        for kind in (EVICT, DELETE, SCALE):
            for stale in self.directory.glob(f"{kind}-*"):
                stale.unlink(missing_ok=True)
        atomic_write(self.directory / "controller.pid", f"{os.getpid()}\n".encode())

    def close(self) -> None:
        (self.directory / "controller.pid").unlink(missing_ok=True)

    def requests(self) -> list[tuple[str, int]]:
        """The requests waiting: (evict or delete, index), (scale, count)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted((m.group(1), int(m.group(2))) for m in map(_REQUEST.match, names) if m)

    def answer(self, kind: str, index: int, done: bool, message: str) -> None:
        atomic_write(self.directory / f"{kind}-{index}.answer", json.dumps({"done": done, "message": message}).encode())
        (self.directory / f"{kind}-{index}.request").unlink(missing_ok=True)


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


def request(root: Path, kind: str, index: int, timeout: float = 30.0) -> str:
    """Ask the local-job running with ``--volume-root root`` to evict or delete (``kind``) index's pod, or to scale the
    Job to ``index`` pods; its answer, or EvictionError."""
    directory = root / "control"
    try:
        pid = int((directory / "controller.pid").read_text())
    except (OSError, ValueError):
        raise EvictionError(f"no local-job is running with --volume-root {root} (no {directory}/controller.pid)") from None
    if not _alive(pid):
        raise EvictionError(f"the local-job that used --volume-root {root} (pid {pid}) is no longer running")
    answer = directory / f"{kind}-{index}.answer"
    answer.unlink(missing_ok=True)
    atomic_write(directory / f"{kind}-{index}.request", f"{time.time()}\n".encode())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer.exists():
            reply = json.loads(answer.read_text())
            answer.unlink(missing_ok=True)
            if not reply["done"]:
                raise EvictionError(reply["message"], refused=True)
            return reply["message"]
        if not _alive(pid):
            break
        time.sleep(0.05)
    (directory / f"{kind}-{index}.request").unlink(missing_ok=True)
    raise EvictionError(f"the local-job (pid {pid}) did not answer within {timeout:g} s")
