"""What local-job shows while the Job runs: every pod's output and local-job's own notes, line by line, and
where the output is a terminal, a live line per running pod below them (its age and latest line), redrawn
in place. Piped or redirected, the lines alone: nothing a log file would have to strip."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from trainer_contract.progress import format_duration

REDRAW_SECONDS = 1.0  # the live lines' clocks tick this often even when no pod prints


@dataclass
class PodLine:
    started: float
    latest: str = "starting"


class Display:
    """Plain lines; the base of the live display."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()
        self.pods: dict[str, PodLine] = {}

    def emit(self, line: str, pod: str | None = None) -> None:
        """A line of pod ``pod``'s output (prefixed with its name), or of local-job's own (``pod`` None)."""
        with self.lock:
            if pod is not None and pod in self.pods:
                self.pods[pod].latest = line.split("] ", 1)[-1]
            self._write(line)

    def pod_started(self, pod: str) -> None:
        with self.lock:
            self.pods[pod] = PodLine(time.monotonic())
            self._changed()

    def pod_ended(self, pod: str) -> None:
        with self.lock:
            self.pods.pop(pod, None)
            self._changed()

    def tick(self) -> None:
        """Called often by the controller's loop."""

    def close(self) -> None:
        """Called once the Job has ended."""

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def _changed(self) -> None:
        pass


class LiveDisplay(Display):
    """On a terminal: the lines scroll above a block of one line per running pod, redrawn in place."""

    def __init__(self, stream: TextIO | None = None):
        super().__init__(stream)
        self.drawn = 0  # lines of the live block now on the screen
        self.last_draw = 0.0

    def _write(self, line: str) -> None:
        self._erase()
        self.stream.write(line + "\n")
        self._draw()

    def _changed(self) -> None:
        self._erase()
        self._draw()

    def tick(self) -> None:
        with self.lock:
            if time.monotonic() - self.last_draw >= REDRAW_SECONDS:
                self._changed()

    def close(self) -> None:
        with self.lock:
            self._erase()
            self.stream.flush()

    def _erase(self) -> None:
        if self.drawn:
            # up to the block's first line, then clear to the end of the screen
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")
            self.drawn = 0

    def _draw(self) -> None:
        width = max(40, shutil.get_terminal_size((100, 24)).columns) - 1
        now = time.monotonic()
        for name, pod in sorted(self.pods.items()):
            text = f"  {name}: running {format_duration(now - pod.started)} | {pod.latest}"
            self.stream.write(text[:width] + "\n")
        self.drawn = len(self.pods)
        self.last_draw = now
        self.stream.flush()


def display_for(stream: TextIO | None = None) -> Display:
    """The live display on a terminal that can move the cursor, plain lines anywhere else."""
    stream = stream or sys.stdout
    live = stream.isatty() and os.environ.get("TERM", "dumb") not in ("dumb", "")
    return LiveDisplay(stream) if live else Display(stream)
