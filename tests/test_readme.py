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


def test_the_own_training_commands_work_as_written_in_a_new_shell(tmp_path):
    """Render and the offline schema check, as the README writes them (local-job runs the same example in
    tests/examples/; kubectl apply needs a cluster): in a new shell, after the quick start's .venv."""
    import os
    import subprocess

    from tests.conftest import BIN

    block = re.search(r"after the quick start[^\n]*\n\n```sh\n(.*?)```", README, re.S).group(1)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    assert lines[0] == ". .venv/bin/activate"  # the tools are found by name only once it is active
    runnable = [line for line in lines[1:] if not line.startswith(("local-job", "kubectl"))]
    assert [line.split()[0] for line in runnable] == ["gen-manifests", "pip"]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}  # what activating .venv does, for this venv
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # the checkout, seen from a directory of the test's own
    for line in runnable:
        result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, f"{line}: {result.stderr[-2000:]}"
    assert "kind: Job" in (tmp_path / "toy-ddp.yaml").read_text()
