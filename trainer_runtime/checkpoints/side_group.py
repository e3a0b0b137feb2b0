"""The gloo process group that checkpoint writes beside the training (beside.py) and every rank's transfers to and
from the bucket (bucket_shares.py) run their collectives on, never the training's: one per process, so that a gang
holds one more gloo mesh of its ranks, not one per use (at 8,192 ranks each mesh is 8,191 connections a rank).

Its timeout allows for a transfer: a rank that finishes its share first waits there for the slowest. A peer that
dies is found by the training's own collectives (COLLECTIVE_TIMEOUT), and a process that exits on a failure does not
wait for this group's (beside.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

TIMEOUT = timedelta(hours=6)
_made: tuple[Any, Any] | None = None  # (the default group it was made beside, the group)


def side_group() -> Any:
    """The group, or None without a process group. Every rank makes it at the same point the first time (a
    collective): at a start with a bucket, else at the first sharded write beside the training."""
    global _made
    if not dist.is_initialized():
        return None
    if _made is None or _made[0] is not dist.group.WORLD:
        _made = (dist.group.WORLD, dist.new_group(backend="gloo", timeout=TIMEOUT))
    return _made[1]
