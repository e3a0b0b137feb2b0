"""SIGTERM before training starts (downloading, waiting for the data): the process ends at once, within any
grace period, and leaves nothing half-written."""

import contextlib
import os
import signal
import time

import pytest

from testbed.http_mirror import Mirror
from testbed.mnist_data import write_mirror
from tests.localjob.test_local_job_runs import SMALL
from tests.mnist.launch import free_port, kill_tree, rank_command, rank_env, start, worker_env
from trainer_contract import exit_codes

pytestmark = [pytest.mark.slow, pytest.mark.onecore]

STALLED_FILE = "train-images-idx3-ubyte.gz"


@contextlib.contextmanager
def gang_downloading(tmp_path):
    """Rank 0 downloads from a mirror that stalls half-way; rank 1 waits for its word. Both killed at the end."""
    checksums = write_mirror(tmp_path / "mirror", SMALL)
    with Mirror(tmp_path / "mirror", stall={STALLED_FILE}) as mirror:
        base = worker_env(tmp_path / "data", tmp_path / "out", DOWNLOAD="true", MNIST_MIRROR=mirror.url,
                          MNIST_CHECKSUMS=checksums, DOWNLOAD_TIMEOUT=600)
        port = free_port()
        ranks = [start(rank_command(), rank_env(base, rank, 2, port)) for rank in (0, 1)]
        try:
            assert mirror.server.stalling.wait(120), "rank 0 never reached the stalled download"
            time.sleep(1)  # rank 1 is past the rendezvous, polling for the verdict
            assert all(rank.poll() is None for rank in ranks)
            yield ranks
        finally:
            for rank in ranks:
                kill_tree(rank)


def stop(process, timeout=30) -> tuple[float, str]:
    signalled = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)
    output = process.communicate(timeout=timeout)[0]
    return time.monotonic() - signalled, output


def leftovers(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "data").rglob("*")
                  if p.name.startswith(".download-") or p.is_file())


def test_sigterm_while_rank_1_waits_for_the_data(tmp_path):
    with gang_downloading(tmp_path) as ranks:
        elapsed, output = stop(ranks[1])
        assert elapsed < 5, output  # not after DOWNLOAD_TIMEOUT, nor after rank 0's download
        assert ranks[1].returncode == exit_codes.TERMINATED, output
        assert "Rank 1: stopped: received SIGTERM before training started; nothing to save" in output
        # rank 0 is stopped in the middle of its download: it ends at once, the staging directory goes
        elapsed, output = stop(ranks[0])
        assert elapsed < 5, output
        assert ranks[0].returncode == exit_codes.TERMINATED, output
    assert leftovers(tmp_path) == []  # nothing half-downloaded, nothing installed
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_sigterm_to_the_downloading_rank_releases_the_waiting_one(tmp_path):
    with gang_downloading(tmp_path) as ranks:
        elapsed, output = stop(ranks[0])
        assert elapsed < 5 and ranks[0].returncode == exit_codes.TERMINATED, output
        waiting = ranks[1].communicate(timeout=30)[0]
        # the victim says why and is not counted against the Job (75)
        assert ranks[1].returncode == exit_codes.PEER_LOST, waiting
        # (with hand-made ranks the store lives in rank 0's process: it may be gone before the verdict is read)
        assert ("global rank 0 was stopped while preparing the data" in waiting
                or "global rank 0 went away while preparing the data" in waiting), waiting
    assert leftovers(tmp_path) == []
