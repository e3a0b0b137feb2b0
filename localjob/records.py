"""What local-job records of a Job: each pod as the Job's status lists it (phase, exit codes, conditions, times),
and where the status lives."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# The Job's status as it stands, in the volume root: the controller publishes it as it changes; `local-job
# status` (and `./run.sh --local --status`) read it, `local-job clean` removes it.
LIVE_STATUS = "status.json"


def api_time(seconds: float) -> str:
    """A time as the Kubernetes API writes it (RFC 3339, UTC, whole seconds): conditions, pod start and end."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass
class PodRecord:
    name: str
    index: int
    phase: str = "Pending"
    exit_codes: dict[str, int] = field(default_factory=dict)
    conditions: list[dict] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    terminated_by: str = ""  # why the controller terminated the pod when the Job ended, if it did
    ports: dict[str, int] = field(default_factory=dict)  # its container's named ports on this machine (metrics)
