"""The batch script is code: every value that reaches it stays data when bash runs it.

The rendered script is run by bash as the first node runs it, with srun, scontrol and the launcher check stubbed
(each srun call records its arguments and environment): whatever strings the values hold, the script runs
nothing it did not write, and each value reaches the training's environment or command line as that string.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.generator.helpers import run_main

# What an attacker would write: each of bash's ways to run a command, quotes to close ours, and the payload.
PAYLOAD = "touch PWNED"
TOKENS = [f"$({PAYLOAD})", f"`{PAYLOAD}`", f";{PAYLOAD};", f"&&{PAYLOAD}", f"|{PAYLOAD}", f"$(({PAYLOAD}))", '"',
          "'", "\\", "$", "${", "}", "$((1+1))", "~", "*", "?", "[", "]", "!", "#", "%", " ", "-", "=", "a", "é",
          ">PWNED", "<", "{a,b}", "$HOME", "${IFS}", "\\'"]
HOSTILE = st.lists(st.sampled_from(TOKENS) | st.text(max_size=3), min_size=1, max_size=8).map("".join)

STUBS = {
    # each call: its arguments and environment, one JSON line; the training step's srun is the one after "env"
    "srun": """#!/usr/bin/python3
import json, os, sys
with open(os.environ["SRUN_CALLS"], "a") as calls:
    calls.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}) + "\\n")
""",
    "scontrol": """#!/bin/sh
case "$1 $2" in
  "show hostnames") echo node1 ;;
  "show node") echo "NodeName=node1 NodeAddr=127.0.0.1 State=IDLE" ;;
  *) echo "$@" >> "$SRUN_CALLS.scontrol" ;;
esac
""",
    # the launcher checks: the nodes can start it
    "python": "#!/bin/sh\nexit 0\n",
    "torchrun": "#!/bin/sh\nexit 0\n",
}


def run_script(script: str, directory: Path, **environment: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run ``script`` by bash in ``directory`` as the first node of a 2-node allocation, the stubs first on PATH."""
    stubs = directory / "stubs"
    stubs.mkdir()
    for name, text in STUBS.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    (directory / "job.sbatch").write_text(script)
    calls = directory / "srun-calls"
    result = subprocess.run(
        ["/bin/bash", "job.sbatch"], capture_output=True, text=True, timeout=30, cwd=directory,
        env={"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(directory), "SRUN_CALLS": str(calls),
             "SLURM_SUBMIT_DIR": str(directory / "submit"), "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2",
             "SLURM_JOB_NODELIST": "node[1-2]", **environment})
    records = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return result, records


def planted(directory: Path) -> list[Path]:
    """What the payload made: a file named PWNED (no value's own directory is named so: every token around it
    adds a character to the name)."""
    return [path for path in directory.rglob("PWNED")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=HOSTILE)
@example(text=f'a"$({PAYLOAD})"b')
@example(text=f"x';{PAYLOAD};'")
def test_any_value_reaching_the_script_stays_data(tmp_path_factory, text):
    """A path storage URI (model and dataset), a config_map value, an env value, a program argument and the
    working directory, all holding ``text``: the script renders (or is refused with nothing on stdout), and run
    by bash it plants nothing and hands each value over unchanged."""
    directory = tmp_path_factory.mktemp("quoting")
    model, dataset, working_dir = f"/models/{text}", f"/data/{text}", f"{directory}/work/{text}"
    result = run_main("--target", "slurm",
                      "--set-string", f"initializer.model.storage_uri={model}",
                      "--set-string", f"initializer.dataset.storage_uri={dataset}",
                      "--set-string", f"config_map.NOTE={text}",
                      "--set", f"env=[{{name: OTHER_NOTE, value: {json.dumps(text)}}}]",
                      "--set", "entrypoint.module=null", "--set-string", "entrypoint.script=train.py",
                      "--set", f"entrypoint.args=[{json.dumps(text)}]",
                      "--set-string", f"working_dir={working_dir}")
    if result.exit_code != 0:
        assert result.exit_code == 2 and result.stdout == "" and "error" in result.stderr, result.output
        event("refused")
        return
    event("rendered and run")
    os.makedirs(working_dir, exist_ok=True)
    ran, calls = run_script(result.stdout, directory)
    assert planted(directory) == [], ran.stderr
    assert ran.returncode == 0, ran.stderr
    [training] = calls  # path sources: nothing to stage
    assert training["env"]["PWD"] == os.path.normpath(working_dir)
    for step in calls:
        assert (step["env"]["MODEL_DIR"], step["env"]["DATASET_DIR"]) == (model.rstrip("/") or "/", dataset.rstrip("/"))
        assert (step["env"]["NOTE"], step["env"]["OTHER_NOTE"]) == (text, text)
    assert training["argv"][-2:] == ["train.py", text]


def test_a_uri_from_the_submitters_environment_reaches_the_stage_step_only(tmp_path):
    """storage_uri_secret on Slurm: the presigned URL comes from the environment sbatch runs in; the stage step
    needs it, the training step (the user's program, its logs) is not given it, as no worker container is on
    Kubernetes. A signing key stays: the training step's launcher signs what it uploads."""
    result = run_main("--target", "slurm", "--set", "initializer.dataset.storage_uri_secret={name: s, key: url}",
                      "--set", "checkpoint.storage_uri=s3://bucket/runs",
                      "--set", "checkpoint.signing_secret={name: k, key: key}")
    assert result.exit_code == 0, result.output
    presigned = "https://bucket.example/data.tar?X-Amz-Signature=planted"
    ran, calls = run_script(result.stdout, tmp_path, INDEXED_TRAINER_DATASET_URI=presigned,
                            INDEXED_TRAINER_CHECKPOINT_SIGNING_KEY="signing")
    assert ran.returncode == 0, ran.stderr
    stage, training = calls
    assert stage["env"]["INDEXED_TRAINER_DATASET_URI"] == presigned
    assert "INDEXED_TRAINER_DATASET_URI" not in training["env"]
    assert training["env"]["INDEXED_TRAINER_CHECKPOINT_SIGNING_KEY"] == "signing"
    assert "planted" not in ran.stdout + ran.stderr


@pytest.mark.parametrize("content", ["$(touch PWNED)", "-5", "99999999999999999999", "x[$(touch PWNED)]", ""])
def test_the_restart_counter_is_read_as_digits_only(tmp_path, content):
    """The failures file on the shared directory is data: a command, a negative number or an endless one in it
    neither runs nor requeues forever; a failed step counts from what digits it holds (at most 9)."""
    result = run_main("--target", "slurm", f"--set-string=slurm.shared_dir={tmp_path / 'shared'}")
    assert result.exit_code == 0, result.output
    runs = tmp_path / "shared" / "runs" / "mnist-train"
    runs.mkdir(parents=True)
    (runs / ".slurm-failures-7").write_text(content)
    script = result.stdout.replace('code=$?', 'code=1  # the step failed', 1)
    ran, _ = run_script(script, tmp_path)
    assert planted(tmp_path) == [], ran.stderr
    digits = "".join(ch for ch in content if ch.isdigit())[:9]
    spent = int(digits or 0) + 1
    assert (runs / ".slurm-failures-7").read_text().strip() == str(spent)
    if spent > 3:
        assert ran.returncode == 1 and f"{spent} failures in a row without a newer checkpoint > max_restarts 3: not " \
                                       "requeued" in ran.stderr
    else:
        assert f"failure {spent} in a row of at most 3 restarts): requeued" in ran.stderr


def test_the_restart_counter_counts_failed_steps_in_a_row_and_a_step_after_progress_starts_it_anew(tmp_path):
    """max_restarts 3 bounds failed steps one after another, not over the job's life: a step that published a
    newer checkpoint before it failed (a fault after training) is not counted and sets the count back to 0, so
    crash, crash, fault, crash leaves 1, where a whole-life count would have left 3."""
    result = run_main("--target", "slurm", f"--set-string=slurm.shared_dir={tmp_path / 'shared'}")
    assert result.exit_code == 0, result.output
    runs = tmp_path / "shared" / "runs" / "mnist-train"
    # the step fails; in a fault after training, its rank 0 noted a newer checkpoint first (PROGRESS_PATH)
    step = ('code=1  # the step failed\nif [ -n "${NEW_CHECKPOINT:-}" ]; then mkdir -p "$OUTPUT_DIR/.gang" && '
            'echo "1 $NEW_CHECKPOINT 1700000000.0" > "$OUTPUT_DIR/.gang/progress"; fi')
    script = result.stdout.replace("code=$?", step, 1)
    spent = []
    for number, ending in enumerate(["crash", "crash", "fault", "crash"]):
        directory = tmp_path / f"allocation-{number}"
        directory.mkdir()
        extra = {"NEW_CHECKPOINT": f"ckpt-e{number:04d}-s000000.pt"} if ending == "fault" else {}
        ran, _ = run_script(script, directory, **extra)
        assert ran.returncode == 1 and "requeued" in ran.stderr and "not requeued" not in ran.stderr, ran.stderr
        counter = runs / ".slurm-failures-7"
        spent.append(int(counter.read_text()) if counter.exists() else 0)  # no counter: nothing counted
    assert spent == [1, 2, 0, 1]
    assert "failure 1 in a row of at most 3 restarts): requeued" in ran.stderr
