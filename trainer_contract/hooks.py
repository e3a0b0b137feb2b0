"""The one seam where a test steps into a run: named points the worker passes, and at most one hook, which
a test installs (tests/fault_injection/ does, to inject faults). Production installs none: each point costs a
check of one variable, and the worker neither reads nor parses any test setting.

    start              setup begins; context: rank, output_dir, under_launcher, log
    download           on the rank that prepares the data, before it tells the others the outcome
    batch              before each batch; context: epoch, batch (both counted from 1)
    checkpoint         a checkpoint write begins on this rank
    before-rename      a file is written and fsynced under its temporary name, not yet renamed into place
    checkpoint-written a checkpoint is on disk (this rank's part; on rank 0 published and pruned); in the
                       writer's thread when saves are asynchronous
    completed          the run completed (model saved, every rank released), before the exit
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Hook = Callable[..., None]
_hook: Hook | None = None


def install(hook: Hook | None) -> None:
    global _hook
    _hook = hook


def point(name: str, **context: Any) -> None:
    if _hook is not None:
        _hook(name, **context)
