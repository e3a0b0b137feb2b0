"""`./run.sh --status`: what a person reads about a Job on the cluster (kubectl's JSON in, lines out)."""

import json
import os
import subprocess
from datetime import datetime, timezone

from generator.status import describe, latest_progress
from tests.conftest import BIN, ROOT

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=timezone.utc)
JOB = {
    "metadata": {"name": "mnist-train", "namespace": "ml"},
    "spec": {"completions": 2, "backoffLimit": 6},
    "status": {"active": 2, "failed": 1, "conditions": []},
}


def pod(name, index, created, phase, state, container="worker"):
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "status": {"phase": phase, "containerStatuses": [{"name": container, "state": state}]}}


PODS = [
    pod("mnist-train-1-bbbbb", 1, "2026-11-24T11:50:00Z", "Failed",
        {"terminated": {"exitCode": 78, "message": "exit 78: bad configuration: retrying cannot help, the Job fails; "
                                                   "worker rank 1 failed first with exit code 78"}}),
    pod("mnist-train-0-aaaaa", 0, "2026-11-24T11:50:00Z", "Running",
        {"running": {"startedAt": "2026-11-24T11:57:55Z"}}),
    pod("mnist-train-1-ccccc", 1, "2026-11-24T11:55:00Z", "Pending", {"waiting": {"reason": "ContainerCreating"}}),
]


def test_each_index_its_pods_exit_codes_meanings_and_progress():
    lines = describe(JOB, PODS, "Rank 0: epoch 2/5, test accuracy=0.9712, 2000 images/s, 20 s elapsed", NOW)
    assert lines == [
        "Job ml/mnist-train: Running; 2 active, 0 succeeded, 1 failed (backoffLimit 6)",
        "index 0: mnist-train-0-aaaaa Running for 2 min 05 s",
        "index 1: mnist-train-1-bbbbb Failed, exit 78 (bad configuration: retrying cannot help, the Job fails): exit "
        "78: bad configuration: retrying cannot help, the Job fails; worker rank 1 failed first with exit code 78",
        "         mnist-train-1-ccccc Pending (ContainerCreating)",
        "index 0's latest progress: Rank 0: epoch 2/5, test accuracy=0.9712, 2000 images/s, 20 s elapsed",
        "last error: mnist-train-1-bbbbb exit 78 (bad configuration: retrying cannot help, the Job fails): exit 78: "
        "bad configuration: retrying cannot help, the Job fails; worker rank 1 failed first with exit code 78",
    ]


def test_a_finished_job_shows_its_conditions():
    job = {**JOB, "status": {"succeeded": 2, "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached"},
        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached"}]}}
    lines = describe(job, [], None, NOW)
    assert lines[0] == "Job ml/mnist-train: Complete; 0 active, 2 succeeded, 0 failed (backoffLimit 6)"
    assert lines[1:] == ["  SuccessCriteriaMet: CompletionsReached: Reached", "  Complete: CompletionsReached: Reached",
                         "index 0: no pod", "index 1: no pod"]


def test_the_latest_progress_is_rank_0s_epoch_line_else_the_last_line():
    log = "launcher: ...\nRank 0: epoch: 2/5, batch: 10/63, mini-batch size: 32\nRank 1: epoch: 2/5\n"
    assert latest_progress(log) == "Rank 0: epoch: 2/5, batch: 10/63, mini-batch size: 32"
    assert latest_progress("step 10 loss 0.3\nstep 20 loss 0.2\n") == "step 20 loss 0.2"
    assert latest_progress("") is None


def test_run_sh_status_asks_kubectl_and_prints_the_lines(tmp_path):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (tmp_path / "job.json").write_text(json.dumps(JOB))
    (tmp_path / "pods.json").write_text(json.dumps({"items": PODS}))
    (bin_dir / "kubectl").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{tmp_path}/calls"\n'
        f'case "$*" in *"get job"*) cat "{tmp_path}/job.json" ;; *"get pods"*) cat "{tmp_path}/pods.json" ;;\n'
        '  *logs*--limit-bytes*) printf "launcher: warning: this pod asked for 8 GPUs (resources.gpu.accelerator_count) '
        'but sees none: training on the CPU\\nRank 0: epoch: 1/5\\n" ;;\n'
        '  *logs*) printf "Rank 0: epoch: 1/5, batch: 20/63, mini-batch size: 32\\n" ;; esac\n')
    (bin_dir / "kubectl").chmod(0o755)
    env = {**os.environ, "BUILD_DIR": str(tmp_path / "build"), "PATH": f"{bin_dir}:{BIN}:{os.environ['PATH']}"}
    subprocess.run([str(ROOT / "prepare.sh"), "--set", "namespace=ml"], env=env, cwd=ROOT, check=True,
                   capture_output=True)
    result = subprocess.run([str(ROOT / "run.sh"), "--status"], env=env, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "index 1: mnist-train-1-bbbbb Failed, exit 78 (bad configuration" in result.stdout
    # the launcher's warning, from the head of index 0's log: said before the rendezvous
    assert ("warning: this pod asked for 8 GPUs (resources.gpu.accelerator_count) but sees none: training on the CPU"
            in result.stdout.splitlines())
    assert "index 0's latest progress: Rank 0: epoch: 1/5, batch: 20/63, mini-batch size: 32" in result.stdout
    assert "index 0's latest progress: Rank 0: epoch: 1/5, batch: 20/63" in result.stdout
    calls = (tmp_path / "calls").read_text()
    assert "-n ml get job mnist-train -o json" in calls
    assert "-n ml get pods -l batch.kubernetes.io/job-name=mnist-train -o json" in calls
    assert "-n ml logs mnist-train-0-aaaaa -c worker --tail=200" in calls
