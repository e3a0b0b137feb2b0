"""A pod's containers as process trees: started in their own session, output streamed with the pod's name,
and ended as a container runtime would end them, every process of the pod included."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from localjob.podspec import POD_MARKER, ContainerRun
from trainer_contract.exit_codes import signal_exit_code


def _pids_whose_environment(matches: Callable[[list[bytes]], bool]) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if matches(handle.read().split(b"\0")):
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def pod_pids(uid: str) -> list[int]:
    """Every live process of the pod: they all carry its marker in their environment.

    torchrun starts its workers in new sessions, so killing the agent's process group leaves them training;
    the marker finds them wherever they were re-parented.
    """
    needle = f"{POD_MARKER}={uid}".encode()
    return _pids_whose_environment(lambda environment: needle in environment)


def pids_of_pods_named(prefix: str, volume_root: Path) -> list[int]:
    """The live processes of the pods whose names start with ``prefix`` (``mnist-train-1-``: index 1's, whatever
    its suffix) in the local-job whose volume root is ``volume_root``: a pod's TMPDIR lies under it, and another
    local-job on the same machine may run pods of the same names. For those who stand in for a lost node (the tests,
    the recovery bench)."""
    marker = f"{POD_MARKER}={prefix}".encode()
    inside = tuple({f"TMPDIR={volume_root}/".encode(), f"TMPDIR={volume_root.resolve()}/".encode()})
    return _pids_whose_environment(lambda environment: any(item.startswith(marker) for item in environment)
                                   and any(item.startswith(inside) for item in environment))


def kill_pod(uid: str, sig: int = signal.SIGKILL) -> None:
    for pid in pod_pids(uid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class ContainerProcess:
    """One running container: its process tree and a thread copying its output, line by line."""

    def __init__(self, run: ContainerRun, uid: str, pod: str, label: str, log_path: Path,
                 emit: Callable[[str, str], None], cpus: set[int] | None):
        self.run, self.uid = run, uid
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = log_path.open("ab")

        def in_child():  # runs in the child before exec: the pod's share of the CPUs, its securityContext
            if cpus:
                os.sched_setaffinity(0, cpus)
            run.identity.in_child()

        # as the pod's user (local-job run as root; localjob/identity.py), else as local-job's own
        user = run.identity.run_as.popen_arguments() if run.identity.run_as else {}
        self.process = subprocess.Popen(
            run.argv, env=run.env, cwd=run.cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=in_child, **user,
        )
        self.pump = threading.Thread(target=self._copy_output, args=(pod, label, emit), daemon=True)
        self.pump.start()

    def _copy_output(self, pod: str, label: str, emit: Callable[[str, str], None]) -> None:
        """Each line to the pod's log file, stamped as `kubectl logs --timestamps` shows it, and to the display."""
        output = self.process.stdout
        assert output is not None  # stdout=PIPE
        for raw in iter(output.readline, b""):
            stamp = datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
            self.log.write(stamp.encode() + b" " + raw)
            self.log.flush()
            emit(f"[{label}] {raw.decode('utf-8', errors='replace').rstrip()}", pod)
        output.close()

    def poll(self) -> int | None:
        """The exit code once the main process has exited; the runtime then kills what it left behind."""
        code = self.process.poll()
        if code is not None:
            kill_pod(self.uid)
            self.pump.join(timeout=5)
            self.log.close()
        return code

    def terminate(self, grace: float) -> None:
        """As the kubelet deletes a pod: SIGTERM to the main process, SIGKILL to everything after the grace."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        kill_pod(self.uid)
        self.process.wait()
        deadline = time.monotonic() + 10
        while pod_pids(self.uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.pump.join(timeout=5)
        if not self.log.closed:
            self.log.close()

    @staticmethod
    def exit_code(code: int) -> int:
        """A signal death reads as 128 + signal, as container runtimes report it."""
        return signal_exit_code(-code) if code < 0 else code
