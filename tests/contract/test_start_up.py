"""trainer_contract/start_up.py: a process's heavy imports run with the cyclic collector paused, and what they built
is frozen out of its reach; the collector comes back as it was, also when an import fails. Each built-in program
names start imports that exist, so that its entry and its warm workers import what its training will."""

from __future__ import annotations

import gc
import importlib.util
import sys

import pytest

from trainer_contract.program_settings import PROGRAMS
from trainer_contract.start_up import heavy_imports, import_all


@pytest.fixture(autouse=True)
def collector_as_it_was():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_inside_and_back_as_it_was_after(enabled):
    (gc.enable if enabled else gc.disable)()
    frozen = gc.get_freeze_count()
    with heavy_imports():
        assert not gc.isenabled()
        built = [[] for _ in range(1000)]
    assert gc.isenabled() is enabled
    assert gc.get_freeze_count() >= frozen + len(built)  # what the block built is in the permanent generation


def test_a_failing_import_still_gives_the_collector_back():
    gc.enable()
    with pytest.raises(ModuleNotFoundError):
        import_all(["json", "no_such_module_of_ours"])
    assert gc.isenabled() and "json" in sys.modules


def test_import_all_imports_each_module_in_order(monkeypatch):
    imported = []
    monkeypatch.setattr(importlib, "import_module", imported.append)
    import_all(["a", "b.c", "d"])
    assert imported == ["a", "b.c", "d"]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda program: program.module)
def test_each_programs_start_imports_exist_and_begin_with_its_training_module(program):
    assert program.start_imports[0] == program.training
    for name in program.start_imports:
        assert importlib.util.find_spec(name) is not None, name
