"""Setup work that takes minutes on a cold machine (the worker image's base, its wheelhouse, its build, its import
into a node's containerd): pytest-timeout's per-test clock (setup.cfg: 600 s) would cut it at the first test that
asks for it, on a fresh machine only, where no cache is warm yet. Each such step is bounded by its own timeout
instead (what it does on a cold machine, docs/contributing.md); the test's clock is stopped while it runs and
started afresh after it, so the test itself keeps its 600 s and a hang anywhere else is still cut.

Each step says what it does before it starts and how long it took, past pytest's capture: a CI log shows where a
cold run's minutes went."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import pytest_timeout


def say(request: pytest.FixtureRequest, message: str) -> None:
    """One line on the terminal (stderr), through pytest's capture."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else _nothing():
        print(message, file=sys.stderr, flush=True)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def long_setup(request: pytest.FixtureRequest, what: str, bound: float) -> Iterator[None]:
    """Run the block outside the requesting test's pytest-timeout clock; ``bound`` is the block's own limit in
    seconds (the subprocess timeout it passes on), said in the line that announces it."""
    item = request._pyfuncitem  # the test whose setup triggered a session fixture; pytest has no public name
    hook = item.config.hook
    settings = pytest_timeout._get_item_settings(item)
    timed = bool(settings.timeout) and not settings.func_only
    clock = f"; the test's {settings.timeout:.0f} s clock waits for it" if timed else ""
    say(request, f"{what}: started (bounded at {bound / 60:.0f} min{clock})")
    if timed:
        hook.pytest_timeout_cancel_timer(item=item)
    started = time.monotonic()
    try:
        yield
    finally:
        say(request, f"{what}: {time.monotonic() - started:.0f} s")
        if timed:
            hook.pytest_timeout_set_timer(item=item, settings=settings)
