"""What a pending job waits for, on a real Slurm cluster (slurmctld and two slurmd of 2 CPUs on this machine, this
module's own): squeue's reason for the rendered script, said by `./run.sh --slurm` while it waits and by
`./run.sh --slurm --status`, with the values key to change. Each job here stays pending; none runs the training."""

import os
import signal
import subprocess
import threading
import time

import pytest

from tests.conftest import BIN, ROOT
from tests.slurm_cluster import started_cluster

pytestmark = [pytest.mark.slurm]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with started_cluster(tmp_path_factory.mktemp("slurm-waiting")) as running:
        # partitions of this cluster only (the other modules start their own): limits the rendered job exceeds
        running.run(["scontrol", "create", "PartitionName=short", "Nodes=node[1-2]", "MaxTime=1"])
        running.run(["scontrol", "create", "PartitionName=single", "Nodes=node[1-2]", "MaxNodes=1"])
        yield running


def prepare(tmp_path, *sets: str) -> dict:
    env = {**os.environ, "BUILD_DIR": str(tmp_path / "build"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    args = [arg for item in ("slurm.time_limit='10'", *sets) for arg in ("--set", item)]
    result = subprocess.run([str(ROOT / "prepare.sh"), "--target", "slurm", *args], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return env


class RunSlurm:
    """`./run.sh --slurm` in the background, its stderr lines collected as they come."""

    def __init__(self, cluster, env, cwd):
        self.process = subprocess.Popen([str(ROOT / "run.sh"), "--slurm"], env={**env, **cluster.env}, cwd=cwd,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(iter(self.process.stderr.readline, "")),
                                       daemon=True)
        self.reader.start()

    def wait_for(self, start: str, timeout: float = 40) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line.rstrip("\n") for line in list(self.lines) if line.startswith(start)]
            if found:
                return found[-1]
            assert self.process.poll() is None, "".join(self.lines)
            time.sleep(0.2)
        raise AssertionError(f"no line starting {start!r} in {timeout} s: {''.join(self.lines)}")

    def finish(self, timeout: float = 30) -> int:
        """run.sh's exit code; stopped (its session: run.sh and its poller) where it has not ended in time."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise
        finally:
            self.reader.join(timeout=5)


def job_id_of(run: RunSlurm) -> str:
    return run.wait_for("run.sh: submitted Slurm job ").rsplit(" ", 1)[1]


@pytest.mark.parametrize("sets, reason, expected", [
    (["slurm.partition=short"], "PartitionTimeLimit",
     "PENDING (PartitionTimeLimit): its time limit (00:10:00) is longer than partition short allows (MaxTime "
     "00:01:00): lower slurm.time_limit, or choose another slurm.partition"),
    (["slurm.partition=single"], "PartitionNodeLimit",
     "PENDING (PartitionNodeLimit): its 2 nodes are outside partition single's limits (MinNodes 1, MaxNodes 1), or "
     "some of its nodes are down or drained: change replicas (2), or choose another slurm.partition"),
])
def test_run_slurm_says_why_the_job_waits_while_it_does(cluster, tmp_path, sets, reason, expected):
    env = prepare(tmp_path, *sets)
    run = RunSlurm(cluster, env, tmp_path)
    try:
        job_id = job_id_of(run)
        # the first poll may find the reason the scheduler set at submission: run.sh says each new one
        line = run.wait_for(f"waiting: Slurm job {job_id} mnist-train PENDING ({reason})")
        assert line == f"waiting: Slurm job {job_id} mnist-train {expected}"
        assert cluster.job_state(job_id)["JobState"] == "PENDING"
        status = subprocess.run([str(ROOT / "run.sh"), "--slurm", "--status"], capture_output=True, text=True,
                                env={**env, **cluster.env}, cwd=tmp_path, timeout=60)
        assert status.returncode == 0, status.stderr
        assert line in status.stdout.splitlines()
    finally:
        cluster.run(["scancel", "--name=mnist-train"], check=False)
        code = run.finish()
    # a pending job cancelled ends with ExitCode 0:0: run.sh, as sbatch --wait, exits 0
    assert code == 0
    assert run.lines[-1].rstrip("\n") == "run.sh: Job mnist-train ended with exit code 0"
    assert f"Slurm job {job_id} mnist-train: CANCELLED, exit 0 after 00:00:00 (restarts 0)\n" in run.lines


def test_a_job_behind_one_holding_every_node_waits_for_resources(cluster, tmp_path):
    holder = cluster.run(["sbatch", "--parsable", "--nodes=2", "--exclusive", "--output=/dev/null", "--time=5",
                          "--wrap", "sleep 300"], cwd=tmp_path).stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 30
        while cluster.job_state(holder)["JobState"] != "RUNNING":
            assert time.monotonic() < deadline, cluster.job_state(holder)
            time.sleep(0.5)
        env = prepare(tmp_path)
        (tmp_path / "logs").mkdir()
        job_id = cluster.run(["sbatch", "--parsable", str(tmp_path / "build" / "job.sbatch")],
                             cwd=tmp_path).stdout.strip().split(";")[0]
        deadline = time.monotonic() + 30
        while cluster.job_state(job_id).get("Reason") != "Resources":
            assert time.monotonic() < deadline, cluster.job_state(job_id)
            time.sleep(0.5)
        status = subprocess.run([str(BIN / "python"), "-m", "status_views.slurm", job_id], capture_output=True,
                                text=True, env={**env, **cluster.env}, timeout=60)
        assert status.returncode == 0, status.stderr
        assert status.stdout.splitlines() == [
            f"Slurm job {job_id} mnist-train: PENDING (Resources)",
            f"waiting: Slurm job {job_id} mnist-train PENDING (Resources): the nodes it asks for are in use by other "
            "jobs: it starts when they are free, sooner with less: replicas (2 nodes), resources.cpu (2 CPUs per "
            "node), resources.memory (4G per node)"]
    finally:
        cluster.run(["scancel", "--name=mnist-train"], check=False)
        cluster.run(["scancel", holder], check=False)
