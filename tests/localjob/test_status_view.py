"""`local-job status` (and `./run.sh --local --status`): a local run in the lines `./run.sh --status` shows for a
cluster, read from what a local-job publishes in its volume root (status.json, the pods' logs)."""

import json
import os
import subprocess
import time
from datetime import datetime, timezone

import pytest

from localjob.status import read_state
from tests.conftest import BIN, OUTSIDE, ROOT

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=timezone.utc)
STARTED = NOW.timestamp() - 125


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def publish(root, pods, pid, condition=None, conditions=(), logs=None):
    """What a local-job writes in its volume root: its status, its pods' logs and (running) its control file."""
    root.mkdir(parents=True, exist_ok=True)
    status = {"name": "mnist-train", "namespace": "default", "conditions": list(conditions), "succeeded": 0,
              "failed": sum(1 for p in pods if p["phase"] == "Failed"), "completedIndexes": "", "failedIndexes": "",
              "condition": condition, "ignored": 0, "restarts": {"0": 0, "1": 1}, "pods": pods, "completions": 2,
              "backoffLimit": 3, "localJob": {"pid": pid, "startedAt": STARTED, "endedAt": None}}
    (root / "status.json").write_text(json.dumps(status))
    (root / "control").mkdir(exist_ok=True)
    (root / "control" / "controller.pid").write_text(f"{pid}\n")
    (root / "logs").mkdir(exist_ok=True)
    for name, lines in (logs or {}).items():
        (root / "logs" / f"{name}.log").write_text("".join(f"2026-11-24T11:58:{i:02d}.000000Z {line}\n"
                                                           for i, line in enumerate(lines)))


def record(name, index, phase, codes=None, finished=None):
    return {"name": name, "index": index, "phase": phase, "exit_codes": codes or {}, "conditions": [],
            "started": STARTED, "finished": finished or 0.0}


PODS = [record("mnist-train-0-aaaaa", 0, "Running"),
        record("mnist-train-1-bbbbb", 1, "Failed", {"check-config": 0, "worker": 1}, STARTED + 30),
        record("mnist-train-1-ccccc", 1, "Running")]
LOGS = {
    "mnist-train-0-aaaaa": ["launcher: warning: this pod asked for 1 GPU (resources.gpu.accelerator_count) but "
                            "sees none: training on the CPU (set resources.gpu.cpu_fallback: false to fail instead)",
                            "Rank 0: epoch 2/5, test accuracy=0.9712, 2000 images/s, 20 s elapsed, about 40 s left",
                            "Rank 0: epoch: 3/5, batch: 50/63, mini-batch size: 64"],
    "mnist-train-1-bbbbb": ["Traceback (most recent call last):", "RuntimeError: out of cheese"],
}


@pytest.mark.parametrize("case, pid, expected_head", [
    ("running", os.getpid(), "Job default/mnist-train: Running; 2 active, 0 succeeded, 1 failed (backoffLimit 3)"),
    # the local-job was killed (or the machine restarted): not a Job that runs forever
    ("abandoned", None, "Job default/mnist-train: Stopped; 0 active, 0 succeeded, 1 failed (backoffLimit 3)"),
], ids=["running", "abandoned"])  # not the pid: the same ids in every collecting process
def test_a_run_shows_its_pods_progress_eta_warnings_and_last_error(tmp_path, case, pid, expected_head):
    pid = pid or dead_pid()
    publish(tmp_path, PODS, pid, logs=LOGS)
    lines = read_state(tmp_path, NOW).lines
    assert lines[0] == expected_head
    running = "Running for 2 min 05 s" if case == "running" else "Running (LocalJobGone)"
    assert f"index 0: mnist-train-0-aaaaa {running}" in lines
    assert ("index 1: mnist-train-1-bbbbb Failed, exit 1 (the program failed (an error of its own)) after 30 s: RuntimeError: "
            "out of cheese") in lines
    assert ("index 0's latest progress: Rank 0: epoch: 3/5, batch: 50/63, mini-batch size: 64") in lines
    assert ("warning: this pod asked for 1 GPU (resources.gpu.accelerator_count) but sees none: training on the "
            "CPU (set resources.gpu.cpu_fallback: false to fail instead)") in lines
    assert ("last error: mnist-train-1-bbbbb exit 1 (the program failed (an error of its own)): RuntimeError: out "
            "of cheese") in lines
    if case == "abandoned":
        assert any("the local-job (pid" in line and "ended before the Job did; run it again" in line for line in lines)


def test_no_run_is_one_line_and_exit_1(tmp_path):
    result = subprocess.run([str(BIN / "local-job"), "status", "--volume-root", str(tmp_path / "none")],
                            capture_output=True, text=True, cwd=OUTSIDE)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().startswith("local-job status: no local run in ") and result.stderr.count("\n") == 1


def script_env(tmp_path):
    return {**os.environ, "BUILD_DIR": str(tmp_path / "build"), "RUNS_DIR": str(tmp_path / "runs"),
            "PATH": f"{BIN}:{os.environ['PATH']}", "XDG_STATE_HOME": str(tmp_path / "state")}


def test_run_sh_local_status_shows_the_local_run_either_way_round(tmp_path):
    env = script_env(tmp_path)
    subprocess.run([str(ROOT / "prepare.sh")], env=env, cwd=ROOT, check=True, capture_output=True)
    root = tmp_path / "runs" / "mnist-train"
    ended = [record("mnist-train-0-aaaaa", 0, "Succeeded", {"check-config": 0, "worker": 0}, time.time()),
             record("mnist-train-1-bbbbb", 1, "Succeeded", {"check-config": 0, "worker": 0}, time.time())]
    complete = {"type": "Complete", "status": "True", "reason": "SuccessPolicy", "message": "Matched rules at index 0"}
    publish(root, ended, dead_pid(), condition={k: complete[k] for k in ("type", "reason", "message")},
            conditions=[complete], logs={"mnist-train-0-aaaaa": ["Rank 0: epoch 5/5, test accuracy=0.9900, done"]})
    for args in (["--local", "--status"], ["--status", "--local"]):
        result = subprocess.run([str(ROOT / "run.sh"), *args], env=env, cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[:2] == [
            "Job default/mnist-train: Complete; 0 active, 0 succeeded, 0 failed (backoffLimit 3)",
            "  Complete: SuccessPolicy: Matched rules at index 0"]
        assert "index 0's latest progress: Rank 0: epoch 5/5, test accuracy=0.9900, done" in result.stdout


def test_a_refused_local_run_points_at_no_earlier_status(tmp_path):
    env = script_env(tmp_path)
    subprocess.run([str(ROOT / "prepare.sh")], env=env, cwd=ROOT, check=True, capture_output=True)
    publish(tmp_path / "runs" / "mnist-train", [], dead_pid())  # an earlier run's status
    result = subprocess.run([str(ROOT / "run.sh"), "--local", "--volume", f"mnist-train-data={tmp_path / 'nope'}"],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "no such directory" in result.stderr
    assert "status" not in result.stderr.splitlines()[-1]  # the closing line is local-job's refusal, nothing stale
    assert "Job status" not in result.stderr


def test_status_wait_follows_the_run_until_its_job_ends_and_exits_with_its_outcome(tmp_path):
    """`local-job status --wait`: the shared wait of status_views/view.py over the local view, as
    `python -m status_views.kubernetes --wait` follows a cluster's Job: the lines at each change, 0 once Complete."""
    publish(tmp_path, PODS, os.getpid(), logs=LOGS)

    def finish():
        time.sleep(3)
        finished = [record("mnist-train-0-aaaaa", 0, "Succeeded", {"worker": 0}, STARTED + 60),
                    record("mnist-train-1-ccccc", 1, "Succeeded", {"worker": 0}, STARTED + 60)]
        publish(tmp_path, finished, os.getpid(), condition={"type": "Complete", "reason": "", "message": ""},
                conditions=[{"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": ""}])

    import threading
    threading.Thread(target=finish).start()
    result = subprocess.run([str(BIN / "local-job"), "status", "--wait", "--volume-root", str(tmp_path)],
                            capture_output=True, text=True, timeout=60, cwd=OUTSIDE)
    assert result.returncode == 0, result.stderr
    heads = [line for line in result.stderr.splitlines() if line.startswith("Job default/mnist-train")]
    assert heads[0].startswith("Job default/mnist-train: Running") and heads[-1].startswith(
        "Job default/mnist-train: Complete"), result.stderr


def test_status_wait_on_a_run_whose_local_job_is_gone_ends_with_1(tmp_path):
    publish(tmp_path, PODS, dead_pid(), logs=LOGS)
    result = subprocess.run([str(BIN / "local-job"), "status", "--wait", "--volume-root", str(tmp_path)],
                            capture_output=True, text=True, timeout=60, cwd=OUTSIDE)
    assert result.returncode == 1 and "ended before the Job did" in result.stderr, result.stderr


def test_a_pod_failed_in_an_init_container_reads_as_the_kubelets_pod_does(tmp_path):
    """check-config refused the values: the same lines as for a cluster's pod (tests/status_views' counterpart, and
    the realnode tier's test_values_a_hand_edit_broke_fail_the_job_at_once): the exit is check-config's, the worker
    waits in PodInitializing."""
    failed = record("mnist-train-0-ddddd", 0, "Failed", {"check-config": 78}, STARTED + 2)
    publish(tmp_path, [failed], dead_pid(), logs={"mnist-train-0-ddddd": [
        "Rank 0: configuration error: EPOCHS: 'abc' must be a whole number",
        "Rank 0: exiting with code 78 (bad configuration); see `python -m worker --help`"]})
    lines = read_state(tmp_path, NOW).lines
    meaning = "bad configuration: retrying cannot help, the Job fails"
    assert (f"index 0: mnist-train-0-ddddd Failed, exit 78 in check-config ({meaning}) after 2 s: Rank 0: "
            "configuration error: EPOCHS: 'abc' must be a whole number") in lines
    assert (f"last error: mnist-train-0-ddddd exit 78 in check-config ({meaning}): Rank 0: configuration error: "
            "EPOCHS: 'abc' must be a whole number") in lines
    assert not any(line.startswith("index 0's latest progress") for line in lines)  # the worker never ran
