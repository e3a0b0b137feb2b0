"""A process's start: its heavy imports (torch, torch._dynamo, transformers, Lightning, peft) with Python's cyclic
garbage collector paused, then everything they built moved out of its reach.

Those imports allocate millions of objects that live as long as the process; the collector, triggered by
allocations, walks them again and again while they are made, for nothing: 15 to 25 % of the CPU time a process
spends on them, which every rank of every node pays at each start (`python -m bench.start_up`). Paused, then
frozen (gc.freeze: the permanent generation, which no later collection walks), they cost the training's own
collections and the interpreter's teardown nothing either, and a process forked afterwards
(trainer_launcher/warm_workers.py) does not write to their pages when it collects.

Torch-free: it imports nothing itself.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


@contextmanager
def heavy_imports() -> Iterator[None]:
    """Around the block that imports a process's libraries: the collector paused, then what survived frozen, and the
    collector back as it was (also when an import fails)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def import_all(modules: Iterable[str]) -> None:
    """Import ``modules`` in order, inside heavy_imports."""
    with heavy_imports():
        for name in modules:
            importlib.import_module(name)


def die_with_parent() -> None:
    """In a child, before it runs anything: SIGKILL from the kernel when the thread that started it dies
    (PR_SET_PDEATHSIG), however it dies (SIGKILL included), so that no child outlives the process that keeps it."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
