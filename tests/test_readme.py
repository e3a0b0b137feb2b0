"""The README's generated tables match the code, and its quick start names the commands that exist."""

import re

from generator.reference import values_reference
from tests.conftest import ROOT
from worker.config import config_reference

README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(name: str) -> str:
    match = re.search(rf"<!-- {name}:[^>]*-->\n(.*?)<!-- /{name} -->", README, re.S)
    assert match, f"README has no {name} section"
    return match.group(1)


def test_values_table_matches_the_schema_and_defaults():
    assert section("values-reference") == values_reference()


def test_worker_table_matches_the_configuration():
    assert section("worker-reference") == config_reference()


def test_quick_start_commands_exist():
    assert "./prepare.sh && ./run.sh --local" in README
    assert "bash .ci/run" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/pytest -q" in ci and ".venv/bin/pytest -q" in README
