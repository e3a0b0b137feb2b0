"""Faults injected deterministically (FAULT_INJECT, keyed on rank and attempt) into Jobs run by local-job.

Each fault fires on the first start only, so the gang restart that follows must finish the Job: the tests
assert the Job's outcome and counters (in place: only a pod lost whole is recreated), the epoch training resumed
at, that every epoch is recorded exactly once (none lost, none done twice past its checkpoint), and that no
checkpoint was ever skipped as corrupt.
"""

import time

import pytest

from testbed.http_mirror import Mirror
from testbed.mnist_data import write_mirror
from tests.localjob.test_local_job_runs import SMALL, render, run_local_job, volume
from tests.mnist.launch import fault_env, recorded_epochs

pytestmark = pytest.mark.slow


def fault_job(fault: str, *sets: str) -> tuple[bytes, dict]:
    """The Job's manifests, and the environment local-job gives its containers to inject ``fault``."""
    return render("replicas=2", "config_map.EPOCHS=3", "config_map.BATCH_SIZE=16", *sets), fault_env(fault)


def assert_recovered(result, log, status, claim, resumed_from: str | None, recreated: dict[str, int]):
    assert result.returncode == 0, log[-5000:] + result.stderr.decode()[-2000:]
    assert status["condition"]["type"] == "Complete"
    assert status["restarts"] == recreated  # in place: only a pod lost whole was recreated
    assert "round 2 of the gang: new workers" in log
    assert "skipping checkpoint" not in log  # nothing corrupt was ever offered for loading
    output = claim / "runs" / "mnist-train"
    assert recorded_epochs(output) == [1, 2, 3]
    if resumed_from:
        after = log[log.index(f"resuming from {resumed_from}"):]
        assert "epoch: 1/3" not in after  # epoch 1 was checkpointed: not redone
    assert (output / "model.pt").exists()


def test_one_rank_sigkilled_inside_a_two_process_pod(tmp_path):
    claim = volume(tmp_path, SMALL)
    # rank 1 is pod 0's second process: its torchrun fails the pod, pod 1 notices, the gang restarts
    manifests, faults = fault_job("sigkill@batch=2.3,rank=1,attempt=0", "local_device_count=2")
    result, log, status = run_local_job(tmp_path, manifests, claim, env=faults)
    assert "Rank 1: FAULT_INJECT: sigkill at batch=2.3 (attempt 0)" in log
    assert_recovered(result, log, status, claim, resumed_from="ckpt-e0001-s000000.pt", recreated={"0": 0, "1": 0})
    assert "Rank 3: training completed." in log  # 2 pods x 2 processes
    # pod 0's launcher restarted its workers, and did not count the round: it had published epoch 1's checkpoint
    # (a fault after progress); pod 1 waited in place for it
    assert ("round 1 failed: this pod's worker failed with exit code 137; restarting in place, not counted: fault "
            "after progress (checkpoint ckpt-e0001-s000000.pt published in this round; 0 of at most 3") in log
    assert status["failed"] == 0 and len(status["pods"]) == 2


def test_the_pod_hosting_rank_0_killed(tmp_path):
    claim = volume(tmp_path, SMALL)
    manifests, faults = fault_job("sigkill-pod@batch=2.3,rank=0,attempt=0")
    result, log, status = run_local_job(tmp_path, manifests, claim, env=faults)
    assert "Rank 0: FAULT_INJECT: sigkill-pod at batch=2.3 (attempt 0)" in log
    assert "Rank 1: error: lost contact with a peer" in log  # the survivor's worker leaves instead of hanging
    # pod 1 waits in place for pod 0's replacement, which opens the next round
    assert_recovered(result, log, status, claim, resumed_from="ckpt-e0001-s000000.pt", recreated={"0": 1, "1": 0})


def test_the_downloading_pod_dies_while_the_others_wait(tmp_path):
    claim = tmp_path / "volume-without-data"
    claim.mkdir()
    # the checksums ride on the volume (the pod sees /pvc-home), the archives come from the mirror
    (claim / "SHA256SUMS").write_bytes(write_mirror(tmp_path / "mirror", SMALL).read_bytes())
    with Mirror(tmp_path / "mirror") as mirror:
        # rank 0 spends 3 s "downloading" (so rank 1 is surely waiting on the store), then its pod dies
        manifests, faults = fault_job("sleep=3@download,rank=0,attempt=0; sigkill-pod@download,rank=0,attempt=0",
                              "config_map.DOWNLOAD='true'",
                              f"config_map.MNIST_MIRROR={mirror.url}", "config_map.MNIST_CHECKSUMS=/pvc-home/SHA256SUMS",
                              "config_map.DOWNLOAD_TIMEOUT=600")
        started = time.monotonic()
        result, log, status = run_local_job(tmp_path, manifests, claim, env=faults)
        elapsed = time.monotonic() - started
        requests = dict(mirror.requests)
    assert "Rank 0: FAULT_INJECT: sigkill-pod at download (attempt 0)" in log
    # rank 1 did not sit out DOWNLOAD_TIMEOUT: the store went away with pod 0 and it said why
    assert "Rank 1: error: global rank 0 went away while preparing the data" in log
    assert elapsed < 300  # far from DOWNLOAD_TIMEOUT=600
    assert_recovered(result, log, status, claim, resumed_from=None, recreated={"0": 1, "1": 0})
    assert requests == {f"{name}.gz": 1 for name in SMALL}  # the restarted rank 0 fetched each file once
