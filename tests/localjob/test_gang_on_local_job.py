"""The gang as the real Job controller runs it: evictions are free, the leader decides success, a fault that
never heals ends the Job after max_restarts + 1 gang attempts, restarted in place or (restart_in_place=false) as
recreated pods (real pods: the launcher, torchrun and gloo)."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, OUTSIDE
from tests.controlplane.scenarios import (
    DELETED_AND_REPLACED,
    DISRUPTED_AND_REPLACED,
    RESTARTED_IN_PLACE,
    fault_outcome,
)
from tests.localjob.test_local_job_runs import SMALL, local_job_args, render, run_local_job, volume
from tests.mnist.launch import CRASH_FAULT_CRASH, fault_env, read_until, recorded_epochs

pytestmark = pytest.mark.slow


def evict(root, index: int, kind: str = "evict") -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "local-job"), kind, "--volume-root", str(root), str(index)],
                          capture_output=True, text=True, timeout=60)


def pod_ended_from_outside(tmp_path, kind: str, index: int, *sets: str) -> tuple[Path, str, dict]:
    """The 3-epoch job (``sets`` added) under local-job; once index ``index``'s rank is 10 batches into epoch 2,
    `local-job KIND` of that pod from "another terminal" (evict: as kubectl drain would; delete: as kubectl delete
    pod would). The claim, local-job's whole output (a success) and the Job's final status."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", *sets, "config_map.EPOCHS=3", "config_map.BATCH_SIZE=8",
                       "config_map.LOG_INTERVAL=1")
    (tmp_path / "job.yaml").write_bytes(manifests)
    process = subprocess.Popen(local_job_args(tmp_path, claim, source=tmp_path / "job.yaml"), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=OUTSIDE, start_new_session=True)
    seen = []
    try:
        assert read_until(process, f"Rank {index}: epoch: 2/3, batch: 10/64", 180, seen), "".join(seen[-50:])
        asked = evict(tmp_path / "root", index, kind)
        assert asked.returncode == 0, asked.stderr
        assert re.fullmatch(rf"local-job {kind}: pod mnist-train-{index}-\w{{5}} (evicted|deleted)\n", asked.stdout)
        rest = process.communicate(timeout=300)[0]
    finally:
        process.kill() if process.poll() is None else None
    log = "".join(seen) + rest
    assert process.returncode == 0, log[-5000:]
    return claim, log, json.loads((tmp_path / "status.json").read_text())


def test_an_evicted_pod_costs_nothing_and_training_resumes_mid_epoch(tmp_path):
    claim, log, status = pod_ended_from_outside(tmp_path, "evict", 1, "max_restarts=0")
    # max_restarts=0, yet the Job completes: the evicted pod (DisruptionTarget) is ignored, and pod 0, whose
    # worker was its victim, waited in place for the replacement (an uncounted round)
    assert fault_outcome(status) == DISRUPTED_AND_REPLACED  # as the real node's eviction and preemption end
    assert status["ignored"] == 1 and status["restarts"] == {"0": 0, "1": 1}
    first_attempt = {pod["index"]: pod for pod in status["pods"][:2]}
    assert first_attempt[1]["conditions"] == [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    assert first_attempt[1]["exit_codes"]["worker"] == 143 and first_attempt[0]["exit_codes"]["worker"] == 0
    assert "round 2 of the gang: new workers" in log and "restarting in place" not in log
    # the evicted rank's SIGTERM was agreed on by the gang: a mid-epoch checkpoint, resumed from
    step = int(re.search(r"resuming from ckpt-e0001-s(\d{6})\.pt", log).group(1))
    assert 10 <= step < 64
    output = claim / "runs" / "mnist-train"
    assert recorded_epochs(output) == [1, 2, 3]
    assert json.loads((output / "model.json").read_text())["accuracy"] is not None
    # with the Job over, there is nobody to ask
    late = evict(tmp_path / "root", 1)
    assert late.returncode == 2 and "no local-job is running" in late.stderr


def test_a_deleted_pod_is_counted_and_its_replacement_resumes_from_its_sigterm_checkpoint(tmp_path):
    """`local-job delete` as `kubectl delete pod` of index 0: SIGTERM with no condition, so the pod's exit 143 counts
    (max_restarts 1 allows it); the gang checkpoints mid-epoch, the survivor waits in place, the replacement resumes
    from that checkpoint, and the Job ends as the real node's deletion does."""
    claim, log, status = pod_ended_from_outside(tmp_path, "delete", 0, "max_restarts=1")
    assert fault_outcome(status) == DELETED_AND_REPLACED  # as the real node's deletion ends
    assert status["ignored"] == 0 and status["restarts"] == {"0": 1, "1": 0}
    first = status["pods"][0]
    assert first["index"] == 0 and first["conditions"] == [] and first["exit_codes"]["worker"] == 143
    step = int(re.search(r"resuming from ckpt-e0001-s(\d{6})\.pt", log).group(1))
    assert 10 <= step < 64  # the mid-epoch checkpoint the SIGTERM made
    assert recorded_epochs(claim / "runs" / "mnist-train") == [1, 2, 3]


def test_pod_0_killed_after_its_followers_left_completes_the_job(tmp_path):
    claim = volume(tmp_path, SMALL)
    # rank 0 has saved the model and released the gang; 3 s later (the follower has exited 0) its pod dies
    fault = "sleep=3@completed,rank=0,attempt=0; sigkill-pod@completed,rank=0,attempt=0"
    manifests = render("replicas=2", "config_map.EPOCHS=2", "config_map.BATCH_SIZE=32")
    result, log, status = run_local_job(tmp_path, manifests, claim, timeout=300, env=fault_env(fault))
    assert result.returncode == 0, log[-5000:] + result.stderr.decode()[-2000:]
    assert status["condition"]["reason"] == "SuccessPolicy"
    assert status["restarts"] == {"0": 1, "1": 0} and status["failed"] == 1
    # index 0 came back alone, found the run complete and succeeded without a rendezvous
    output = claim / "runs" / "mnist-train"
    assert f"launcher: the run in {output} is already complete (2 epochs" in log
    assert log.count("Rank 0: process group: gloo") == 1
    assert json.loads((output / "model.json").read_text())["accuracy"] is not None
    assert recorded_epochs(output) == [1, 2]


@pytest.mark.parametrize("fault, counted_by", [
    ("exit=3@batch=1.2,rank=1", "this pod's worker failed with exit code 3"),
    ("exit=75@batch=1.2", "every pod of the gang ended as a victim and none failed first"),
])
def test_a_fault_on_every_start_ends_after_max_restarts_plus_one_rounds_in_place(tmp_path, fault, counted_by):
    """In place, no pod is recreated: the launchers count the gang's failed rounds (a crash where it happened; a
    round where every pod was a victim, at index 0) and the one past max_restarts exits 80, which fails the Job.
    (Its node never leaves here: tests/contract/test_gang_rounds.py has a crash loop through departures.)"""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "max_restarts=2", "node_leaves_after_failures=0", "config_map.EPOCHS=2",
                       "config_map.BATCH_SIZE=32")
    result, log, status = run_local_job(tmp_path, manifests, claim, timeout=400, env=fault_env(fault))
    assert result.returncode == 1, log[-5000:]
    assert status["condition"]["reason"] == "PodFailurePolicy"
    assert re.fullmatch(r"Container worker for pod default/mnist-train-[01]-\w{5} failed with exit code 80 matching "
                        r"FailJob rule at index 0", status["condition"]["message"])
    assert status["restarts"] == {"0": 0, "1": 0} and len(status["pods"]) == 2
    assert log.count(f"{counted_by}; restarting in place") == 2  # rounds 1 and 2
    assert f"round 3 failed: {counted_by}; 3 rounds of this Job have failed in a row without a newer checkpoint, more than max_restarts (2)" in log
    assert log.count("Rank 0: process group: gloo") == 3


def test_a_node_that_fails_the_gang_twice_in_a_row_leaves_and_its_new_pod_completes_the_job(tmp_path):
    """Index 1's worker crashes with the same code in rounds 1 and 2 (a broken GPU where it sits): its node leaves
    (exit 81, which the Job ignores) and the Job gives index 1 a new pod that joins round 3, which completes.
    max_restarts 1: counted, the two rounds would have failed the Job (exit 80)."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "max_restarts=1", "config_map.EPOCHS=1", "config_map.BATCH_SIZE=32")
    faults = "exit=3@batch=1.2,rank=1,attempt=0; exit=3@batch=1.2,rank=1,attempt=1"
    result, log, status = run_local_job(tmp_path, manifests, claim, timeout=300, env=fault_env(faults))
    assert result.returncode == 0, log[-5000:] + result.stderr.decode()[-2000:]
    assert ("round 2 failed: this pod's worker failed with exit code 3, the 2 rounds since the last checkpoint this "
            "node (localhost) failed first with that code: the node leaves the gang (node_leaves_after_failures 2); exiting 81, not "
            "counted, for a new pod (cordon node localhost if it is broken; 0 of at most 1 restarts spent)") in log, \
        log[-5000:]
    assert status["ignored"] == 1 and status["failed"] == 0
    left = [pod for pod in status["pods"] if pod["exit_codes"].get("worker") == 81]
    assert [pod["index"] for pod in left] == [1] and log.count("started pod mnist-train-1-") == 2
    assert "round 3 of the gang: new workers" in log
    assert recorded_epochs(claim / "runs" / "mnist-train") == [1]


def test_rounds_failed_without_progress_are_counted_in_a_row_and_training_between_them_starts_anew(tmp_path):
    """max_restarts 1 bounds a crash loop, not a job's life: crash (1 in a row), a fault after epoch 1's
    checkpoint (not counted, the count starts anew), crash again (1 in a row, not 2 of 1): the Job completes. Under
    a count over the job's life the third round exited 80 and the Job failed."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "max_restarts=1", "config_map.EPOCHS=3", "config_map.BATCH_SIZE=32")
    result, log, status = run_local_job(tmp_path, manifests, claim, timeout=500, env=fault_env(CRASH_FAULT_CRASH))
    assert result.returncode == 0, log[-5000:] + result.stderr.decode()[-2000:]
    assert status["restarts"] == {"0": 0, "1": 0}
    worker_failed = "this pod's worker failed with exit code"
    assert (f"round 1 failed: {worker_failed} 3; restarting in place (1 of at most 1 restarts; no newer checkpoint "
            "in this round)") in log, log[-5000:]
    assert (f"round 2 failed: {worker_failed} 137; restarting in place, not counted: fault after progress "
            "(checkpoint ckpt-e0001-s000000.pt published in this round; 0 of at most 1 restarts spent)") in log
    assert (f"round 3 failed: {worker_failed} 3; restarting in place (1 of at most 1 restarts; no newer checkpoint "
            "in this round)") in log, log[-5000:]
    assert "round 4 of the gang: new workers" in log
    assert recorded_epochs(claim / "runs" / "mnist-train") == [1, 2, 3]


def test_a_worker_lost_before_the_process_group_formed_stops_the_whole_round_at_once(tmp_path):
    """Index 1's worker dies as it starts, before the process group has formed: index 0's worker waits in the
    group's connect for an address that never comes, which took the collective timeout (300 s by default: 311 s of
    every pod lost). Index 1's launcher sets the round's key in torchrun's store, index 0's launcher, waiting on it,
    stops its worker at once: the next round starts within seconds and the Job completes, the round counted once
    (index 1's crash), index 0 a victim. The collective timeout is 240 s here, beyond the test's own limit."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "config_map.EPOCHS=1", "config_map.BATCH_SIZE=32",
                       "config_map.COLLECTIVE_TIMEOUT='240'")
    result, log, status = run_local_job(tmp_path, manifests, claim, timeout=200,
                                        env=fault_env("sigkill@start,rank=1,attempt=0"))
    assert result.returncode == 0, log[-5000:] + result.stderr.decode()[-2000:]
    assert status["restarts"] == {"0": 0, "1": 0}
    assert "round 1 failed: this pod's worker failed with exit code 137; restarting in place (1 of at most" in log
    assert ("the round failed on index 1 (exit 137) first: this pod's workers were stopped at once rather than left "
            "waiting for it until the collective timeout; exiting 75 (a victim)") in log, log[-5000:]
    assert "round 2 of the gang: new workers" in log
    assert "connectFullMesh" not in log and "timed out" not in log
    assert recorded_epochs(claim / "runs" / "mnist-train") == [1]


# each fault after a newer checkpoint than the round resumed from: a worker of index 1, then one of index 0, ...
FAULTS_AFTER_PROGRESS = "; ".join(f"sigkill@batch={epoch}.3,rank={epoch % 2},attempt={epoch - 2}" for epoch in range(2, 6))


def test_faults_after_progress_do_not_spend_max_restarts(tmp_path):
    """Four faults, each after the round published a newer checkpoint, with max_restarts 1: a long job under
    recurring faults, not a crash loop; the Job completes, every epoch recorded once. The pods' warm workers warm
    up at the first checkpoint: the later rounds' workers are forked from them (trainer_launcher/warm_workers.py)."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "max_restarts=1", "config_map.EPOCHS=5", "config_map.BATCH_SIZE=32",
                       "warm_workers_after_seconds=0")
    result, log, status = run_local_job(tmp_path, manifests, claim, timeout=500, env=fault_env(FAULTS_AFTER_PROGRESS))
    assert result.returncode == 0, log[-5000:] + result.stderr.decode()[-2000:]
    assert fault_outcome(status) == RESTARTED_IN_PLACE and status["restarts"] == {"0": 0, "1": 0}  # as on the node
    for generation in range(1, 5):
        checkpoint = f"ckpt-e{generation:04d}-s000000.pt"
        assert (f"round {generation} failed: this pod's worker failed with exit code 137; restarting in place, not "
                f"counted: fault after progress (checkpoint {checkpoint} published in this round; 0 of at most 1 "
                "restarts spent)") in log
    assert "round 5 of the gang: new workers" in log
    # each pod's server got ready once; the last rounds' workers started warm, and a killed warm worker is a 137 too
    assert len(re.findall(r"\] launcher: warm workers ready for -m worker", log)) == 2, log[-5000:]
    assert re.search(r"\] launcher: worker rank 1 started warm \(pid \d+", log), log[-5000:]
    output = claim / "runs" / "mnist-train"
    assert recorded_epochs(output) == [1, 2, 3, 4, 5]
    # what each fault cost, said by rank 0 as it resumes, and the run's goodput in its summary
    for number in range(1, 5):
        assert re.search(rf"Rank 0: fault {number}: worker failed \(exit 137\) in round {number}; [\d.]+ s lost: "
                         r"[\d.]+ detect, [\d.]+ restart, [\d.]+ restore, [\d.]+ recompute; goodput \d+%", log), log[-3000:]
    summary = json.loads((output / "model.json").read_text())
    assert summary["faults"] == 4 and 0 < summary["goodput"] < 1
    assert set(summary["fault_seconds"]) == {"detect", "restart", "restore", "recompute"}


def test_a_crash_on_every_start_ends_after_max_restarts_plus_one_gang_attempts(tmp_path):
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "max_restarts=2", "restart_in_place=false", "config_map.EPOCHS=2",
                       "config_map.BATCH_SIZE=32")
    result, log, status = run_local_job(tmp_path, manifests, claim, timeout=400,
                                        env=fault_env("exit=3@batch=1.2,rank=1"))
    assert result.returncode == 1, log[-5000:]
    assert status["condition"]["reason"] == "BackoffLimitExceeded"
    # 3 gang attempts, not 2 x 3: each counted once (rank 1's crash), its victim ignored each time
    assert log.count("started pod mnist-train-1-") == 3
    # rank 1's 3 crashes count; 2 victims are ignored; the last attempt's victim, if it is still running when
    # the Job fails, is terminated and counted as the controller counts it (else it was ignored)
    assert status["failed"] + status["ignored"] == 6 and status["failed"] in (3, 4)
    # index 1 passed its own limit in the same step: the controller lists it although BackoffLimitExceeded ended
    # the Job
    assert status["failedIndexes"] == "1" and status["completedIndexes"] == ""
    assert [c["type"] for c in status["conditions"]] == ["FailureTarget", "Failed"]
    assert status["conditions"][1]["message"] == "Job has reached the specified backoff limit"
    assert status["restarts"] == {"0": 2, "1": 2}
    assert "launcher: worker rank 1 failed first with exit code 3" in log


def test_a_gang_whose_every_pod_fails_as_a_victim_ends(tmp_path):
    """Every rank exits 75 ("a peer failed first") in every attempt: without a counted cause the Job would restart
    forever; index 0 counts each such attempt once (76), so max_restarts=1 ends it after 2 attempts."""
    claim = volume(tmp_path, SMALL)
    manifests = render("replicas=2", "max_restarts=1", "restart_in_place=false", "config_map.EPOCHS=2",
                       "config_map.BATCH_SIZE=32")
    result, log, status = run_local_job(tmp_path, manifests, claim, timeout=400, env=fault_env("exit=75@batch=1.2"))
    assert result.returncode == 1, log[-5000:]
    assert status["condition"]["reason"] == "BackoffLimitExceeded"
    assert log.count("started pod mnist-train-0-") == 2
    # the workers' codes: a replacement that the Job's end stopped in its init container (a loaded machine) has none
    codes = {index: [pod["exit_codes"]["worker"] for pod in status["pods"]
                     if pod["index"] == index and "worker" in pod["exit_codes"]] for index in (0, 1)}
    assert codes[0] == [76, 76]  # once per attempt, by index 0
    assert codes[1][0] == 75  # the others stay victims (ignored)
    assert status["failed"] in (2, 3) and log.count("none failed first: this attempt counts once") == 2
