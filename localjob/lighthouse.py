"""The replica groups' Lighthouse (the render's Deployment beside the Job), run here as its Deployment would run it:
one process for the Job's life, started before the pods and started again if it exits (a Deployment's pod is
recreated), stopped when the Job ends. Its Service's name and port are the factory's to rewrite, as the Job's own
Service's are (localjob/podspec.py)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from trainer_contract.start_up import die_with_parent

# A Deployment's pod that exits is recreated at once; a Lighthouse that cannot start at all is not retried faster.
RESTART_DELAY_SECONDS = 1.0


class LocalLighthouse:
    """``command`` (already local: its binary from local-job's environment, its port this machine's) in a process
    kept running; its output in ``log``."""

    def __init__(self, name: str, command: list[str], log: Path, note: Callable[[str], None]):
        self.name, self.command, self.log, self.note = name, command, log, note
        self.process: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.keeper: threading.Thread | None = None
        self.lock = threading.Lock()  # no new process once stop() has begun
        self.starts = 0

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._spawn()
        self.keeper = threading.Thread(target=self._keep, name="lighthouse", daemon=True)
        self.keeper.start()

    def _spawn(self) -> None:
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(self.command, stdout=output, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            env={"RUST_LOG": "warn"}, preexec_fn=die_with_parent)
        self.starts += 1

    def _keep(self) -> None:
        """Wait for the process; start it again unless the Job has ended."""
        while not self.stopping.is_set():
            assert self.process is not None
            code = self.process.wait()
            if self.stopping.wait(RESTART_DELAY_SECONDS):
                return
            with self.lock:
                if self.stopping.is_set():
                    return
                self.note(f"{self.name}: the Lighthouse exited with code {code}; starting it again, as its "
                          f"Deployment would (the groups wait for their next quorum meanwhile; {self.log})")
                self._spawn()

    def stop(self) -> None:
        with self.lock:
            self.stopping.set()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.keeper is not None:
            self.keeper.join(timeout=10)
