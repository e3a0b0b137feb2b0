"""gen-manifests --target slurm: the same values as one batch script; hostile values cannot inject anything."""

import shutil
import subprocess

import pytest

from tests.generator.helpers import run_main

SHELL_SPECIALS = ["$(touch /tmp/pwned)", "`id`", "a; rm -rf /", "x' y", 'x" y', "line\nbreak", "#SBATCH --nodes=99",
                  "$HOME", "\\", "*", "\t", "!", "~root"]


def render(*sets: str, ok: bool = True):
    args = ["--target", "slurm"]
    for item in sets:
        args += ["--set", item]
    result = run_main(*args)
    if ok:
        assert result.exit_code == 0, result.stderr
    return result


def sbatch_directives(script: str) -> list[str]:
    """The #SBATCH lines sbatch reads: those before the first line that is neither a comment nor blank."""
    lines = []
    for line in script.splitlines()[1:]:
        if line.startswith("#SBATCH"):
            lines.append(line)
        elif line.strip() and not line.startswith("#"):
            break
    return lines


def test_the_default_values_render_a_two_node_batch_script():
    script = render().stdout
    assert script.startswith("#!/bin/bash\n")
    directives = sbatch_directives(script)
    for expected in ("#SBATCH --job-name=mnist-train", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                     "#SBATCH --cpus-per-task=2", "#SBATCH --mem=4096M", "#SBATCH --signal=TERM@60",
                     "#SBATCH --requeue", "#SBATCH --output=logs/%x-%j.out"):
        assert expected in directives
    assert not any("--gres" in line for line in directives)
    assert "python -m worker.launch --node-rank=\"$SLURM_NODEID\"" in script
    assert "--nnodes=2 --nproc-per-node=1" in script and "-m worker" in script
    assert "export DATA_DIR=\"$shared_dir/data\"" in script and "export EPOCHS=5" in script


def test_gpus_partition_time_and_extra_options():
    script = render("resources.gpu.accelerator_count=4", "slurm.partition=gpu", "slurm.account=ml",
                    "slurm.qos=high", "slurm.time_limit=2-00:00:00", "slurm.shared_dir=/scratch/team",
                    "slurm.extra_options=['--constraint=a100', '--exclusive']",
                    "slurm.setup=['module load cuda/12.4', 'source /opt/venv/bin/activate']").stdout
    directives = sbatch_directives(script)
    for expected in ("#SBATCH --gres=gpu:4", "#SBATCH --partition=gpu", "#SBATCH --account=ml", "#SBATCH --qos=high",
                     "#SBATCH --time=2-00:00:00", "#SBATCH --constraint=a100", "#SBATCH --exclusive",
                     "#SBATCH --output=/scratch/team/logs/%x-%j.out"):
        assert expected in directives
    assert "--nproc-per-node=4" in script and "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in script
    assert "\nmodule load cuda/12.4\nsource /opt/venv/bin/activate\n" in script


def test_the_gpu_model_is_a_node_feature_on_slurm():
    script = render("resources.gpu.accelerator_count=2", "resources.gpu.accelerator=NVIDIA-H100-80GB-HBM3").stdout
    directives = sbatch_directives(script)
    assert "#SBATCH --constraint=NVIDIA-H100-80GB-HBM3" in directives and "#SBATCH --gres=gpu:2" in directives
    assert not any("--constraint" in line for line in sbatch_directives(render("resources.gpu.accelerator_count=2").stdout))


def test_values_without_meaning_on_slurm_are_named_as_ignored():
    result = render("namespace=ml", "tolerations=[{key: spot, operator: Exists}]")
    assert "gen-manifests: warning: ignored on Slurm: namespace, tolerations" in result.stderr
    assert "warning" not in render().stderr


@pytest.mark.parametrize("sets, message", [
    (["env=[{name: T, valueFrom: {secretKeyRef: {name: s, key: k}}}]"], "env[0].valueFrom: Slurm has no Secrets"),
    (["env_from_secrets=[s]"], "env_from_secrets: Slurm has no Secrets"),
    (["extra_volumes=[{name: d, mount_path: /d, empty_dir: {}}]"], "extra_volumes: Slurm mounts no volumes"),
    (["slurm.extra_options=['--nodes=9']"], "slurm.extra_options[0]: --nodes is not an option"),
    (["slurm.extra_options=['--comment=a b']"], 'slurm.extra_options[0]: "--comment=a b" must be --name'),
    (["slurm.time_limit=forever"], "slurm.time_limit:"),
    (["slurm.shared_dir=relative/dir"], "slurm.shared_dir:"),
    (['slurm.setup=["ok", "two\\nlines"]'], "slurm.setup[1]:"),
    (["slurm.shared_dir=/scratch//mnist"], "slurm.shared_dir: \"/scratch//mnist\" has an empty path component"),
    (["resources.gpu.accelerator_count=1", "resources.gpu.accelerator=A100", "slurm.extra_options=['--constraint=x']"],
     "slurm.extra_options[0]: --constraint and resources.gpu.accelerator (rendered as --constraint on Slurm) both"),
])
def test_what_cannot_work_on_slurm_is_an_error_naming_the_key(sets, message):
    result = render(*sets, ok=False)
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr, result.stderr


@pytest.mark.parametrize("text", SHELL_SPECIALS)
def test_hostile_strings_stay_data(text, tmp_path):
    """In a config value, an env value, a program argument and the script path, any string is passed to the
    program as that string: bash reads the rendered assignments back to exactly it, and no #SBATCH line appears."""
    script_path = "train.py" if "\n" in text or text.startswith("-") else text
    result = run_main("--target", "slurm", "--set-string", f"config_map.NCCL_NOTE={text}",
                      "--set", "entrypoint.module=null", "--set-string", f"entrypoint.script={script_path}",
                      "--set", f"env=[{{name: NOTE, value: {quote_yaml(text)}}}]",
                      "--set", f"entrypoint.args=[{quote_yaml(text)}]")
    if result.exit_code != 0:
        assert result.stdout == "" and "error" in result.stderr
        return
    script = result.stdout
    assert len(sbatch_directives(script)) == len(sbatch_directives(render().stdout)) + 0
    # the script's environment section, run by bash as sbatch would run it
    environment = script[script.index("# The training's environment"):script.index("# The launcher comes")]
    probe = 'SLURM_SUBMIT_DIR=/submit\n' + environment + 'printf "%s\\0%s" "$NCCL_NOTE" "$NOTE"\n'
    read = subprocess.run(["bash", "-c", probe], capture_output=True, timeout=10, cwd=tmp_path)
    assert read.stdout.decode() == f"{text}\0{text}"
    assert not (tmp_path / "pwned").exists()


def quote_yaml(text: str) -> str:
    import json
    return json.dumps(text)


def test_the_rendered_script_passes_shellcheck(tmp_path):
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    for sets in ([], ["entrypoint.module=null", "entrypoint.script=train.py", "entrypoint.args=['--x', 'a b']",
                      "working_dir=/app", "resources.gpu.accelerator_count=2", "slurm.setup=['module load x']"]):
        (tmp_path / "job.sbatch").write_text(render(*sets).stdout)
        result = subprocess.run(["shellcheck", str(tmp_path / "job.sbatch")], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(("sets", "warned"), [
    (["resources.gpu.accelerator_count=8"], "resources.cpu and resources.memory left at the default "
                                            "(--cpus-per-task=2 --mem=4096M per node) while each node asks for 8 GPU(s)"),
    (["resources.gpu.accelerator_count=8", "resources.cpu=32"], "resources.memory left at the default"),
    (["resources.gpu.accelerator_count=8", "resources.cpu=32", "resources.memory=256"], None),
    ([], None),  # the CPU smoke test: the defaults are sized for it
])
def test_gpus_with_the_default_cpus_and_memory_are_said_on_stderr(sets, warned):
    result = render(*sets)
    warnings = [line for line in result.stderr.splitlines() if "left at the default" in line]
    if warned:
        assert len(warnings) == 1 and warnings[0].startswith(f"gen-manifests: warning: {warned}"), result.stderr
    else:
        assert warnings == [], result.stderr
    assert result.stdout.startswith("#!/bin/bash")  # rendered all the same


def test_the_values_table_lists_exactly_the_extra_options_the_render_accepts():
    from generator.targets.slurm import SLURM_EXTRA_OPTIONS
    from generator.validation import load_schema

    description = load_schema()["properties"]["slurm"]["properties"]["extra_options"]["description"]
    listed = description.rsplit("requeue): ", 1)[1].rstrip(".").split(", ")
    assert listed == sorted(SLURM_EXTRA_OPTIONS)


@pytest.mark.parametrize(("sets", "said"), [
    (["entrypoint.module=null", "entrypoint.script=train.py", "entrypoint.launcher=torchrun"],
     "pretrain: on node7: torchrun is not on PATH: install PyTorch in the environment slurm.setup activates"),
    ([], "pretrain: on node7: python -m worker.launch cannot start: install indexed-trainer"),
])
def test_a_launcher_the_nodes_cannot_start_is_bad_configuration_not_a_failure_to_requeue(sets, said, tmp_path):
    """The batch script, run as the first node runs it, in an environment without the launcher (no torchrun; a
    python without indexed-trainer): exit 78, which the script's own handling never requeues, and one line saying
    what the nodes lack. (The real Slurm runs every test of tests/slurm/test_on_slurm.py past this check.)"""
    script = tmp_path / "job.sbatch"
    script.write_text(render("name=pretrain", f"slurm.shared_dir={tmp_path}", *sets).stdout)
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3")
    result = subprocess.run(["/bin/bash", str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={"PATH": f"{bare}:/usr/bin:/bin", "SLURMD_NODENAME": "node7"})
    assert result.returncode == 78, result.stdout + result.stderr
    assert said in result.stderr and result.stdout == ""


STUBS = {  # the cluster's commands as the first node's batch step sees them: what each answers, requeue recorded
    "srun": 'exit "$SRUN_EXIT"',
    "scontrol": 'case "$1 $2" in "show hostnames") echo node0 ;; "show node") echo "NodeName=node0 NodeAddr=127.0.0.1" ;;'
                ' *) echo "$*" >> "$SCONTROL_LOG" ;; esac',
    "torchft_lighthouse": "exec sleep 30",
}


@pytest.mark.parametrize(("sets", "said", "requeued"), [
    ([], "more failed rounds than max_restarts (exit 80): not requeued", False),
    (["fault_tolerance.replica_groups=true"], "failed with exit code 80 (failure 1 in a row of at most 3 restarts): "
                                              "requeued", True),
])
def test_a_crash_loop_fails_a_gang_and_requeues_replica_groups_counted(sets, said, requeued, tmp_path):
    """srun returns 80 (a launcher past max_restarts): a gang's job fails there, as its Job does (FailJob); with
    replica groups it is one group's crash loop, whose srun returns once every other group has ended too (done, or
    failed): the job is requeued as a counted failure, and the next allocation finds the run finished or resumes."""
    import sys

    script = tmp_path / "job.sbatch"
    script.write_text(render("max_restarts=3", f"slurm.shared_dir={tmp_path}", *sets).stdout)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in {**STUBS, "python": f'exec {sys.executable} "$@"'}.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    log = tmp_path / "scontrol.log"
    result = subprocess.run(["/bin/bash", str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={"PATH": f"{stubs}:/usr/bin:/bin", "SRUN_EXIT": "80", "SCONTROL_LOG": str(log),
                                 "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node0", "SLURM_JOB_NUM_NODES": "2",
                                 "SLURMD_NODENAME": "node0", "SLURM_SUBMIT_DIR": str(tmp_path)})
    assert result.returncode == 80, result.stdout + result.stderr
    assert said in result.stderr
    assert (log.read_text().split() if log.exists() else []) == (["requeue", "7"] if requeued else [])
