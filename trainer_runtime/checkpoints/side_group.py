"""The gloo process group that checkpoint writes beside the training (beside.py) and every rank's transfers to and
from the bucket (bucket_shares.py) run their collectives on, never the training's: one per run, held by the run's
bucket shares where it has a bucket (else by its writes), so that a gang holds one more gloo mesh of its ranks, not
one per use (at 8,192 ranks each mesh is 8,191 connections a rank). It is held by an object of the run, never by
this module: a group still referenced when the interpreter shuts down can abort the process
(trainer_runtime/process_group.py).

Its timeout allows for a transfer: a rank that finishes its share first waits there for the slowest. A peer that
dies is found by the training's own collectives (COLLECTIVE_TIMEOUT), and a process that exits on a failure does not
wait for this group's (beside.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

TIMEOUT = timedelta(hours=6)


def made() -> Any:
    """A new group (a collective: every rank makes it at the same point), or None without a process group."""
    return dist.new_group(backend="gloo", timeout=TIMEOUT) if dist.is_initialized() else None
