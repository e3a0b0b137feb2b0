"""Replica groups as gen-manifests renders them (fault_tolerance.replica_groups), under local-job: the Lighthouse's
Deployment runs beside the Job, and a pod lost whole, index 0 included, costs only its own group."""

import json
import os
import re
import signal
import subprocess

import pytest

from tests.conftest import BIN, OUTSIDE
from tests.localjob.test_gang_on_local_job import evict
from tests.localjob.test_local_job_runs import SMALL, local_job_args, render, volume
from tests.mnist.launch import fault_env, read_until

pytestmark = pytest.mark.slow
pytest.importorskip("torchft", reason="replica groups need the [replicas] extra (torchft)")


@pytest.mark.parametrize("lost", [0])  # index 1 lost whole: the Slurm tier's node killed; a worker killed: tests/mnist
def test_a_pod_lost_whole_costs_its_group_and_the_other_keeps_stepping(tmp_path, lost):
    """Two groups, each one pod; once the job is 20 steps in, `local-job delete` of index ``lost``'s pod (as
    kubectl delete pod: SIGTERM). Its group leaves between two steps (exit 82: not counted) and the other steps on
    alone with the whole step's examples while the Job replaces the pod, whose new group joins a later quorum with
    the survivor's weights and step; the last step's first group writes the model and the Job completes with it,
    ending the other, which waited for that."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "fault_tolerance.replica_groups=true", "max_restarts=1",
                       "config_map.EPOCHS=3", "config_map.BATCH_SIZE=8", "config_map.LOG_INTERVAL=1")
    (tmp_path / "job.yaml").write_bytes(manifests)
    # every step lasts 0.05 s at least: the replacement's start (seconds) is many of the survivor's steps
    env = fault_env("sleep=0.05@batch")
    process = subprocess.Popen(local_job_args(tmp_path, claim, source=tmp_path / "job.yaml", env=env),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=OUTSIDE,
                               start_new_session=True)
    seen: list[str] = []
    try:
        assert read_until(process, "Rank 0: step 20/192 (epoch 1)", 180, seen), "".join(seen[-50:])
        assert "Deployment mnist-train-lighthouse: torchft's Lighthouse on 127.0.0.1" in "".join(seen)
        asked = evict(tmp_path / "root", lost, "delete")
        assert asked.returncode == 0, asked.stderr
        rest = process.communicate(timeout=300)[0]
    finally:
        process.kill() if process.poll() is None else None
    log = "".join(seen) + rest
    assert process.returncode == 0, log[-5000:]
    survivor = 1 - lost
    alone = [int(step) for step in re.findall(
        rf"^\[mnist-train-{survivor}-\w{{5}}\] Rank 0: step (\d+)/192 \(epoch \d\), loss=\S+ on this rank's 16 "
        r"examples, 1 of 2 groups stepping$", log, re.M)]
    joined = [int(step) for step in re.findall(
        rf"^\[mnist-train-{lost}-\w{{5}}\] Rank 0: group{lost} joined at step (\d+), its state from a peer", log, re.M)]
    deleted_at = max(int(step) for step in re.findall(
        rf"^\[mnist-train-{lost}-\w{{5}}\] Rank 0: step (\d+)/192", log, re.M) if int(step) < 60)
    # the survivor stepped alone past where the lost group was, and the new group joined where it had got to
    assert alone and joined and max(alone) > deleted_at + 5, (deleted_at, alone, joined)
    assert joined[-1] >= max(alone), (alone, joined)
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["condition"]["type"] == "Complete"
    assert status["restarts"] == {str(lost): 1, str(survivor): 0} and status["failed"] == 0
    assert re.search(rf"pod mnist-train-{lost}-\w{{5}} failed \(exit codes \{{.*'worker': 82\}}\); podFailurePolicy: "
                     "Ignore", log), log[-5000:]
    summary = json.loads((claim / "runs" / "mnist-train" / "model.json").read_text())
    assert summary["replica_groups"] == 2 and summary["accuracy"] > 0.9
    waited = 1 - summary["written_by_group"]
    assert log.count("model saved to ") == 1, log[-5000:]
    assert re.search(rf"^\[mnist-train-{waited}-\w{{5}}\] Rank 0: group{waited}: the last step's first group writes the "
                     "model; waiting for the Job to complete with it", log, re.M), log[-5000:]


def test_the_lighthouse_killed_is_started_again_and_the_groups_go_on_from_their_step(tmp_path):
    """The Lighthouse's process dies (SIGKILL) between two quorums, while both groups take step 21: local-job starts
    it again, as its Deployment would, the groups' next quorum waits for it and they go on from the step they
    reached (no group fails, no step is redone), and the Job completes. (A Lighthouse lost while a quorum is being
    formed can leave a joining group's transfer to time out first: docs/reliability.md.)"""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "fault_tolerance.replica_groups=true", "max_restarts=0",
                       "config_map.EPOCHS=3", "config_map.BATCH_SIZE=8", "config_map.LOG_INTERVAL=1")
    (tmp_path / "job.yaml").write_bytes(manifests)
    faults = "sleep=0.05@batch; sleep=4@batch=1.21; ledger@committed"
    process = subprocess.Popen(local_job_args(tmp_path, claim, source=tmp_path / "job.yaml", env=fault_env(faults)),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=OUTSIDE,
                               start_new_session=True)
    seen: list[str] = []
    try:
        for _ in (0, 1):  # both groups are in step 21's forward pass, past its quorum
            assert read_until(process, "FAULT_INJECT: sleep=4 at batch=1.21", 180, seen), "".join(seen[-50:])
        port = re.search(r"torchft's Lighthouse on 127\.0\.0\.1 \(--min_replicas=1 --bind=\[::\]:(\d+) ",
                         "".join(seen)).group(1)
        pids = subprocess.run(["pgrep", "-f", f"torchft_lighthouse .*--bind=\\[::\\]:{port} "], capture_output=True,
                              text=True).stdout.split()
        assert len(pids) == 1, pids
        os.kill(int(pids[0]), signal.SIGKILL)
        rest = process.communicate(timeout=300)[0]
    finally:
        process.kill() if process.poll() is None else None
    log = "".join(seen) + rest
    assert process.returncode == 0, log[-5000:]
    assert "Deployment mnist-train-lighthouse: the Lighthouse exited with code -9; starting it again" in log
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["restarts"] == {"0": 0, "1": 0} and status["failed"] == 0  # no group failed
    ledgers = sorted((claim / "runs" / "mnist-train" / ".faults").glob("ledger-*.jsonl"))
    by_group = [[json.loads(line)["step"] for line in path.read_text().splitlines()] for path in ledgers]
    assert len(by_group) == 2
    for steps in by_group:  # no group committed a step twice (nothing rolled back), and none ended early
        assert len(steps) == len(set(steps)) and steps[-1] == 191
    assert set().union(*by_group) == set(range(192))


def test_a_job_scaled_from_2_to_4_groups_and_back_while_it_trains_takes_every_example_once(tmp_path):
    """max_replicas 4: once the job is 20 steps in, `local-job scale 4` (as ./run.sh --scale 4 patches a cluster's
    Job): pods for indexes 2 and 3 start and their groups join a quorum with a peer's state, and the step's examples
    are shared by four groups; then `local-job scale 2`: the pods of indexes 2 and 3 are deleted, their groups leave
    between two steps (exit 82, ignored, never replaced) and the first two go on. No step failed to commit, nothing
    was counted as a failure, and every step took exactly its examples, each epoch every image once."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "fault_tolerance.replica_groups=true", "fault_tolerance.max_replicas=4",
                       "max_restarts=0", "config_map.EPOCHS=3", "config_map.BATCH_SIZE=8", "config_map.LOG_INTERVAL=1")
    (tmp_path / "job.yaml").write_bytes(manifests)
    process = subprocess.Popen(local_job_args(tmp_path, claim, source=tmp_path / "job.yaml",
                                              env=fault_env("sleep=0.1@batch; ledger@committed")),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=OUTSIDE,
                               start_new_session=True)
    seen: list[str] = []
    root = tmp_path / "root"
    try:
        assert read_until(process, "Rank 0: step 20/192 (epoch 1)", 180, seen), "".join(seen[-50:])
        grown = evict(root, 4, "scale")
        assert grown.returncode == 0 and "scaled from 2 to 4 pods" in grown.stdout, grown.stdout + grown.stderr
        for _ in range(3):  # a few steps with four groups
            assert read_until(process, "examples, 4 groups stepping (submitted with 2)", 180, seen), \
                "".join(seen[-50:])
        shrunk = evict(root, 2, "scale")
        assert shrunk.returncode == 0, shrunk.stdout + shrunk.stderr
        refused = evict(root, 5, "scale")
        assert refused.returncode == 1 and "outside the job's bounds" in refused.stderr, refused.stderr
        rest = process.communicate(timeout=300)[0]
    finally:
        process.kill() if process.poll() is None else None
    log = "".join(seen) + rest
    assert process.returncode == 0, log[-5000:]
    joined = {int(group): int(step) for group, step in
              re.findall(r"Rank 0: group(\d) joined at step (\d+), its state from a peer", log)}
    assert {2, 3} <= set(joined) and min(joined[2], joined[3]) > 20, joined
    for index in (2, 3):
        assert re.search(rf"pod mnist-train-{index}-\w{{5}} failed \(exit codes \{{.*'worker': 82\}}\); "
                         "podFailurePolicy: Ignore", log), log[-5000:]
    assert "did not commit" not in log, log[-5000:]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["condition"]["type"] == "Complete" and status["failed"] == 0
    assert status["completions"] == 2
    steps: dict[int, list[int]] = {}
    groups_of: dict[int, set[str]] = {}
    for path in sorted((claim / "runs" / "mnist-train" / ".faults").glob("ledger-*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            steps.setdefault(entry["step"], []).extend(entry["examples"])
            groups_of.setdefault(entry["step"], set()).add(path.name)
    assert sorted(steps) == list(range(192))
    assert max(len(names) for names in groups_of.values()) == 4  # some steps were shared by four groups
    for epoch in range(3):
        taken = [example for step in range(epoch * 64, (epoch + 1) * 64) for example in steps[step]]
        assert sorted(taken) == list(range(1024)), f"epoch {epoch + 1}"  # each image once, none skipped
    assert all(len(examples) == 16 for examples in steps.values())


def test_a_group_in_a_crash_loop_is_ended_and_the_others_complete_the_job(tmp_path):
    """Three groups, max_restarts 1; group 2's worker dies at every batch it starts (node_leaves_after_failures 0:
    the fault is the group's, not its node's). Its launcher restarts it in place once, then its rounds have failed in
    a row past max_restarts: the pod exits 80, which fails its index (FailIndex), not the Job; groups 0 and 1 step on
    (the steps group 2 died in are taken again) and the Job completes."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=3", "fault_tolerance.replica_groups=true", "max_restarts=1",
                       "node_leaves_after_failures=0", "config_map.EPOCHS=3", "config_map.BATCH_SIZE=8",
                       "config_map.LOG_INTERVAL=1")
    (tmp_path / "job.yaml").write_bytes(manifests)
    env = fault_env("sigkill@batch,group=2; sleep=0.1@batch")
    result = subprocess.run(local_job_args(tmp_path, claim, source=tmp_path / "job.yaml", env=env),
                            capture_output=True, text=True, cwd=OUTSIDE, timeout=400)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    assert re.search(r"exiting 80, this replica group ends \(the Job fails its index; the other groups go on\)", log), \
        log[-5000:]
    assert re.search(r"pod mnist-train-2-\w{5} failed \(exit codes \{.*'worker': 80\}\); podFailurePolicy: FailIndex",
                     log), log[-5000:]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["condition"]["type"] == "Complete" and status["failedIndexes"] == "2", status
    assert status["failed"] == 1 and status["restarts"]["2"] == 0  # its index was never given another pod
    assert "2 of 3 groups stepping" in log
    summary = json.loads((claim / "runs" / "mnist-train" / "model.json").read_text())
    assert summary["replica_groups"] == 3 and summary["accuracy"] > 0.9
    # the status view says the groups: the failed index, its bound, and the group the Job completed with
    view = subprocess.run([str(BIN / "local-job"), "status", "--volume-root", str(tmp_path / "root")],
                          capture_output=True, text=True, cwd=OUTSIDE, timeout=60)
    assert re.search(r"^replica groups: 0 of 3 running; failed indexes 2 \(at most 1 may fail: the others step "
                     r"without them\); succeeded: index(es)? [0-9,-]+ \(the Job completes with its first group\)$",
                     view.stdout, re.M), view.stdout
