"""A real Slurm cluster of two nodes on this machine, for the tests: Debian's slurmctld and two slurmd on
loopback ports, run as root without systemd, with their own configuration, state and logs in a directory.

    with SlurmCluster(tmp_dir) as cluster:      # installs Slurm with apt-get where it is missing
        cluster.run(["sbatch", "--wait", script])   # clients get SLURM_CONF from cluster.env

Started with the configuration the Slurm target needs (requeue, signals before the time limit), stopped with
`scontrol shutdown`, then by the recorded PIDs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from localjob.ports import free_ports
from tests import apt

PACKAGES = ("slurmctld", "slurmd", "slurm-client")


def install_slurm() -> str | None:
    """Install Slurm's daemons and clients where they are missing; None, or why it could not be done."""
    return apt.install(PACKAGES, ("slurmctld", "slurmd", "sbatch"))


class SlurmCluster:
    def __init__(self, directory: Path, nodes: int = 2, cpus: int = 2):
        self.directory, self.nodes, self.cpus = directory, nodes, cpus
        self.conf = directory / "slurm.conf"
        self.pids: list[int] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        ctld_port, *node_ports = free_ports(1 + self.nodes)
        for sub in ("state", "log", *(f"spool/node{i + 1}" for i in range(self.nodes))):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        nodes = [f"NodeName=node{i + 1} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={self.cpus} "
                 f"RealMemory=8000 State=UNKNOWN" for i, port in enumerate(node_ports)]
        self.conf.write_text("\n".join([
            "ClusterName=indexed-trainer-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "AuthType=auth/none",
            # a requeued job waits cred_expire before it may start again (default 120 s): short for the tests
            "AuthInfo=cred_expire=10",
            "CredType=cred/none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SlurmUser=root",
            "SlurmdUser=root",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "JobRequeue=1",
            "KillWait=30",
            "MinJobAge=3600",
            f"StateSaveLocation={self.directory / 'state'}",
            f"SlurmdSpoolDir={self.directory / 'spool'}/%n",
            f"SlurmctldPidFile={self.directory / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.directory / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.directory / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.directory / 'log' / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            *nodes,
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _daemon(self, argv: list[str]) -> None:
        process = subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        self.pids.append(process.pid)

    def start(self) -> None:
        self.write_config()
        # -D: in the foreground (of its own session), so that the PID recorded here is the daemon's
        self._daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for node in range(1, self.nodes + 1):
            self._daemon(["slurmd", "-D", "-N", f"node{node}", "-f", str(self.conf)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            result = self.run(["sinfo", "-h", "-o", "%T %D"], check=False)
            states = result.stdout.split()
            if result.returncode == 0 and states[:1] == ["idle"] and int(states[1]) == self.nodes:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the test Slurm cluster did not come up: {self.run(['sinfo'], check=False).stdout}"
                           f"{(self.directory / 'log' / 'slurmctld.log').read_text()[-2000:]}")

    def run(self, argv: list[str], check: bool = True, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env={**self.env, **kwargs.pop("env", {})}, capture_output=True, text=True,
                              timeout=timeout, check=check, **kwargs)

    def job_state(self, job_id: str) -> dict[str, str]:
        """scontrol show job's fields (JobState, ExitCode, Restarts, ...); accounting is off, so no sacct."""
        text = self.run(["scontrol", "show", "job", "-o", job_id]).stdout
        return dict(field.split("=", 1) for field in text.split() if "=" in field)

    def stop(self) -> None:
        # jobs first: slurmstepd outlives a shut-down slurmd, so a job left running would stay behind
        jobs = self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        if jobs:
            self.run(["scancel", *jobs], check=False)
            deadline = time.monotonic() + 60
            while self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split() and time.monotonic() < deadline:
                time.sleep(0.5)
        self.run(["scontrol", "shutdown"], check=False)
        deadline = time.monotonic() + 20
        for pid in self.pids:
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@contextmanager
def started_cluster(directory: Path) -> Iterator[SlurmCluster]:
    """A cluster of this test module's own in ``directory``, stopped after it; where Slurm cannot be installed the
    module is skipped, except under CI (.ci/run's machine can install it: a CI run must not skip these silently)."""
    reason = install_slurm()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with SlurmCluster(directory) as running:
        yield running
