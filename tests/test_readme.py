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
    ci = (ROOT / ".ci" / "run").read_text() + (ROOT / ".ci" / "tiers.sh").read_text()
    assert 'CI_PYTEST="${CI_PYTEST:-.venv/bin/pytest}"' in ci and '"$CI_PYTEST" -q' in ci
    assert ".venv/bin/pytest -q" in README


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


def test_every_gen_manifests_command_shown_with_its_output_prints_that_output():
    """A README code block's `$ gen-manifests ...` line followed by lines (up to the next `$ ` line or the block's
    end) shows what the command writes on stderr: run as written, through the installed console script, from
    the checkout's root, it must write exactly those lines (so the README's messages cannot go stale)."""
    import shlex

    from tests.conftest import run_tool

    shown = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", README, re.S | re.M):
        lines = block.splitlines()
        for index, line in enumerate(lines):
            if not line.startswith("$ gen-manifests"):
                continue
            output = []
            for following in lines[index + 1:]:
                if following.startswith("$ "):
                    break
                output.append(following)
            if output:
                shown.append((line[2:], output))
    assert shown, "the README shows no gen-manifests command with its output"
    for command, output in shown:
        args = shlex.split(command)
        assert not set(args) & {"|", ">", "<", "&&", ";"}, f"{command}: not a plain command; show its output alone"
        result = run_tool(*args, cwd=ROOT)
        assert result.stderr.decode("utf-8").splitlines() == output, command
