"""Downloads shared by ranks, checkpoints and resume, SIGTERM, dead peers: with real processes."""

import os
import signal
import time

import pytest
import torch

from testbed.http_mirror import Mirror
from testbed.mnist_data import raw_files, synthetic_digits, write_mirror
from tests.mnist.launch import (
    free_port,
    kill_tree,
    rank_command,
    rank_env,
    read_until,
    run,
    start,
    torchrun_command,
    worker_env,
)

pytestmark = pytest.mark.slow
SMALL = raw_files(synthetic_digits(512, seed=5), synthetic_digits(128, seed=6))


def test_four_ranks_download_once_from_a_mirror(tmp_path):
    checksums = write_mirror(tmp_path / "mirror", SMALL)
    with Mirror(tmp_path / "mirror") as mirror:
        env = worker_env(tmp_path / "shared-data", tmp_path / "out", EPOCHS=1, DOWNLOAD="true",
                         MNIST_MIRROR=mirror.url, MNIST_CHECKSUMS=checksums)
        result = run(torchrun_command(4), env)
        requests = dict(mirror.requests)
    assert result.returncode == 0, result.stdout[-3000:]
    assert requests == {f"{name}.gz": 1 for name in SMALL}  # rank 0 alone, each file once
    assert result.stdout.count("downloaded http://127.0.0.1") == 4
    assert all(f"Rank {rank}: training completed." in result.stdout for rank in range(4))


def test_a_failed_download_fails_every_rank_promptly(tmp_path):
    checksums = write_mirror(tmp_path / "mirror", SMALL)
    with Mirror(tmp_path / "mirror", truncate={"train-labels-idx1-ubyte.gz"}) as mirror:
        env = worker_env(tmp_path / "data", tmp_path / "out", EPOCHS=1, DOWNLOAD="true", MNIST_MIRROR=mirror.url,
                         MNIST_CHECKSUMS=checksums)
        started = time.monotonic()
        result = run(torchrun_command(2), env, timeout=120)
    assert result.returncode != 0
    assert time.monotonic() - started < 60
    assert "connection cut after" in result.stdout
    # rank 1 is the victim (75, not counted), rank 0 the root cause (69, counted once)
    assert "Rank 1: error: global rank 0 could not prepare the data: could not get train-labels" in result.stdout
    assert "Rank 0: error: data unavailable: " in result.stdout
    assert not (tmp_path / "data" / "MNIST" / "raw" / "train-labels-idx1-ubyte").exists()


def final_weights(directory):
    return torch.load(directory / "model.pt", weights_only=True)


def test_killed_run_resumes_at_the_right_epoch_with_the_same_model(tmp_path, small_dir):
    settings = dict(EPOCHS=3, BATCH_SIZE=32, OMP_NUM_THREADS=1, LOG_INTERVAL=1000)
    reference = run(rank_command(), worker_env(small_dir, tmp_path / "reference", **settings))
    assert reference.returncode == 0, reference.stdout

    out = tmp_path / "interrupted"
    process = start(rank_command(), worker_env(small_dir, out, **settings))
    seen = []
    assert read_until(process, "checkpoint ckpt-e0002-s000000.pt written", 120, seen), "".join(seen)
    kill_tree(process)  # SIGKILL: nothing gets to clean up
    process.wait()
    # damage the newest checkpoint, as a crash of the storage might: the resume must fall back to epoch 1
    newest = out / "checkpoints" / "ckpt-e0002-s000000.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    resumed = run(rank_command(), worker_env(small_dir, out, **settings))
    assert resumed.returncode == 0, resumed.stdout
    assert "skipping checkpoint ckpt-e0002-s000000.pt: checksum mismatch" in resumed.stdout
    assert "resuming from ckpt-e0001-s000000.pt" in resumed.stdout
    assert "epoch: 1/3" not in resumed.stdout and "epoch: 2/3" in resumed.stdout
    for name, tensor in final_weights(tmp_path / "reference").items():
        torch.testing.assert_close(final_weights(out)[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_sigterm_checkpoints_mid_epoch_and_the_rerun_continues_from_there(tmp_path, small_dir):
    settings = dict(EPOCHS=2, BATCH_SIZE=8, LOG_INTERVAL=1, OMP_NUM_THREADS=1)
    out = tmp_path / "out"
    process = start(torchrun_command(2), worker_env(small_dir, out, **settings))
    seen = []
    assert read_until(process, "Rank 1: epoch: 1/2, batch: 5/64", 120, seen), "".join(seen)
    signalled = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)  # as the kubelet does: to the container's main process, torchrun
    output = "".join(seen) + process.communicate(timeout=60)[0]
    assert time.monotonic() - signalled < 20
    assert process.returncode != 0, output
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert len(checkpoints) == 1 and checkpoints[0].startswith("ckpt-e0000-s"), output
    step = int(checkpoints[0][len("ckpt-e0000-s"):-3])
    assert 5 <= step < 64
    assert f"stop requested: checkpointing epoch 1 at batch {step}" in output

    resumed = run(torchrun_command(2), worker_env(small_dir, out, **settings))
    assert resumed.returncode == 0, resumed.stdout
    assert f"resuming from {checkpoints[0]}" in resumed.stdout
    assert f"Rank 0: epoch: 1/2, batch: {step + 1}/64" in resumed.stdout
    assert f"Rank 0: epoch: 1/2, batch: {step}/64" not in resumed.stdout


def test_survivor_exits_within_seconds_when_a_peer_dies(tmp_path, small_dir):
    port = free_port()
    base = worker_env(small_dir, tmp_path / "out", EPOCHS=50, BATCH_SIZE=8, LOG_INTERVAL=1)
    rank0 = start(rank_command(), rank_env(base, 0, 2, port))
    rank1 = start(rank_command(), rank_env(base, 1, 2, port))
    seen = []
    try:
        assert read_until(rank0, "epoch: 1/50, batch: 3/", 120, seen), "".join(seen)
        kill_tree(rank1)  # the other pod vanishes
        killed = time.monotonic()
        output = "".join(seen) + rank0.communicate(timeout=60)[0]
        assert time.monotonic() - killed < 15
        assert rank0.returncode == 75, output
        assert "lost contact with a peer" in output
    finally:
        kill_tree(rank0)
        kill_tree(rank1)


@pytest.mark.onecore
def test_others_give_up_clearly_when_rank_0_never_comes_up(tmp_path, small_dir):
    base = worker_env(small_dir, tmp_path / "out", COLLECTIVE_TIMEOUT=5)
    started = time.monotonic()
    result = run(rank_command(), rank_env(base, 1, 2, free_port()), timeout=120)
    assert time.monotonic() - started < 60
    assert result.returncode == 75, result.stdout + result.stderr
    assert "lost contact with a peer" in result.stdout
