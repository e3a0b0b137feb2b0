"""The generated tables (docs/reference.md, docs/worker.md) match the code, and the README's quick start names the
commands that exist."""

import re

from generator.reference import values_reference
from tests.conftest import ROOT
from trainer_contract.config_reading import config_reference
from trainer_contract.program_settings import TrainConfig

README = (ROOT / "README.md").read_text(encoding="utf-8")
# The README and the pages of docs/ it sends readers to, as one text: where a test replays a block users copy
DOCUMENTATION = "\n".join([README] + [page.read_text(encoding="utf-8") for page in sorted((ROOT / "docs").glob("*.md"))])
WORKER_PAGE = (ROOT / "docs" / "worker.md").read_text(encoding="utf-8")
REFERENCE = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")  # the values' and the programs' tables


def section(name: str, text: str = README) -> str:
    match = re.search(rf"<!-- {name}:[^>]*-->\n(.*?)<!-- /{name} -->", text, re.S)
    assert match, f"no {name} section"
    return match.group(1)


def test_values_table_matches_the_schema_and_defaults():
    assert section("values-reference", REFERENCE) == values_reference()


def test_worker_table_matches_the_configuration():
    assert section("worker-reference", WORKER_PAGE) == config_reference(TrainConfig)


def test_question_answering_table_matches_its_configuration():
    from trainer_contract.program_settings import QaConfig

    assert section("qa-reference", REFERENCE) == config_reference(QaConfig)


def test_fine_tuning_table_matches_its_configuration():
    from trainer_contract.program_settings import FinetuneConfig

    assert section("finetune-reference", REFERENCE) == config_reference(FinetuneConfig)


def test_supervised_fine_tuning_table_matches_its_configuration():
    from trainer_contract.program_settings import SftConfig

    assert section("sft-reference", REFERENCE) == config_reference(SftConfig)


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
    """A code block's `$ gen-manifests ...` line (in the README or a page of docs/) followed by lines (up to the next `$ ` line or the block's
    end) shows what the command writes on stderr: run as written, through the installed console script, from
    the checkout's root, it must write exactly those lines (so the pages' messages cannot go stale)."""
    import shlex

    from tests.conftest import run_tool

    shown = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", DOCUMENTATION, re.S | re.M):
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
    assert len(shown) >= 2, "the README and docs/ show no gen-manifests command with its output"
    for command, output in shown:
        args = shlex.split(command)
        assert not set(args) & {"|", ">", "<", "&&", ";"}, f"{command}: not a plain command; show its output alone"
        result = run_tool(*args, cwd=ROOT)
        assert result.stderr.decode("utf-8").splitlines() == output, command


def block_after(text: str) -> list[str]:
    """The commands of the README's first ```sh block after ``text``, continuation lines joined, comments dropped."""
    start = README.index(text)
    block = re.search(r"```sh\n(.*?)```", README[start:], re.S).group(1).replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_lightning_extra_installs_lightning_as_the_readme_says(tmp_path):
    """`pip install '.[lightning]' --constraint constraints.txt`: the extra exists and brings Lightning (a dry run
    here: the environment under test already has it, as .ci/run installs the extra)."""
    import subprocess
    import sys
    from importlib.metadata import metadata

    lines = block_after("Lightning is the `lightning` extra")
    assert lines[0] == "pip install -q '.[lightning]' --constraint constraints.txt"
    assert "lightning" in metadata("indexed-trainer").get_all("Provides-Extra")
    requires = metadata("indexed-trainer").get_all("Requires-Dist")
    assert any(r.startswith("lightning") and 'extra == "lightning"' in r for r in requires), requires
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-build-isolation",
                             "--report", str(tmp_path / "report.json"), ".[lightning]", "--constraint",
                             "constraints.txt"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    import json
    wanted = {item["metadata"]["name"] for item in json.loads((tmp_path / "report.json").read_text())["install"]}
    assert "indexed-trainer" in wanted  # and Lightning with it, which this environment already holds
    from importlib.util import find_spec
    assert find_spec("lightning") is not None or "lightning" in wanted


def test_the_slurm_gpu_example_renders_gpus_and_the_partition(tmp_path):
    """The README's Slurm command as written: the partition and the GPUs per node reach the batch script."""
    import os
    import subprocess

    from tests.conftest import BIN

    lines = block_after("## On Slurm")
    assert lines[0].startswith("./prepare.sh --target slurm ")
    env = {**os.environ, "BUILD_DIR": str(tmp_path / "build"), "USER": "ada", "PATH": f"{BIN}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", lines[0]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    script = (tmp_path / "build" / "job.sbatch").read_text()
    assert "#SBATCH --partition=gpu\n" in script and "#SBATCH --gres=gpu:4\n" in script
    assert "shared_dir=/scratch/ada/mnist\n" in script and "module load cuda/12.4\n" in script


def test_every_figure_for_bf16_in_the_readme_is_the_benchmarks():
    """The worker page's bf16 speed is docs/performance.md's (python -m bench), not a figure of its own."""
    performance = (ROOT / "docs" / "performance.md").read_text()
    claimed = re.search(r"allreduce/bf16 trained at ([\d.]+) × the\s+images/s of fp32", WORKER_PAGE).group(1)
    row = re.search(r"^STRATEGY/PRECISION allreduce/bf16, ws 2:.*\| ([\d.]+) time, ([\d.]+) rate", performance, re.M)
    assert claimed == row.group(2)
    assert not any(claim in page for claim in ("10x", "10 ×") for page in (README, WORKER_PAGE))
