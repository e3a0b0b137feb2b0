"""Deterministic fault injection, for tests only: FAULT_INJECT makes chosen ranks fail at chosen points.

Installed by sitecustomize.py beside this file, in processes started with this folder on PYTHONPATH, as the
hook of trainer_contract.hooks: the worker itself knows nothing of it.

    FAULT_INJECT="sigkill@batch=2.3,rank=1,attempt=0"        rank 1 dies before batch 3 of epoch 2, first start only
    FAULT_INJECT="sigkill-pod@download,rank=0"                 rank 0's pod dies while the others wait for the data
    FAULT_INJECT="sigterm-pod@batch=2.2,rank=0; sleep=30@checkpoint=2,rank=0"   preempted; the save is too slow
    FAULT_INJECT="sigkill-pod@completed,rank=0,attempt=0"      pod 0 dies after its followers have left
    FAULT_INJECT="ledger@committed"                            every committed step's examples, into a file

Entries are separated by ``;``, each ``ACTION@POINT`` with optional ``,rank=N``, ``,attempt=N`` and ``,group=N``
(the replica group, REPLICA_GROUP) filters.

    points   start        setup begins, before the process group forms (its peers then wait in its connect)
             batch=E.B    before batch B of epoch E (both counted from 1)
             batch        before every batch (a sleep there slows every step: a run that lasts, on any machine)
             download     on the rank that prepares the data, before it tells the others the outcome
             checkpoint   inside every checkpoint write: its file written, not yet renamed into place
             checkpoint=N inside the N-th checkpoint write of this start only
             written=N    once the N-th checkpoint of this start is on disk (asynchronous saves: while the
                          training has gone on), so a kill there is a kill after that checkpoint
             completed    after the run completed (model saved, every rank released), before the exit
             committed    a replica group's step committed (worker.mnist.replicated); context: group, step, examples
    actions  sigkill      this process dies (SIGKILL)
             sigkill-pod  the pod dies: torchrun (the container's main process) and this process, SIGKILL
             sigterm-pod  the pod is preempted: SIGTERM to torchrun, as the kubelet sends it; training goes on
             exit=CODE    this process exits with CODE at once
             sleep=S      this process stalls S seconds
             ledger       the point's context and the attempt as a line of OUTPUT_DIR/.faults/ledger-group<G>-rank<R>.jsonl
                          (with REPLICA_GROUP), so that a test can account for every example a committed step took

``attempt`` is how many times this rank (of its replica group, with REPLICA_GROUP) had started before in this
OUTPUT_DIR (counted in OUTPUT_DIR/.faults/ only while FAULT_INJECT is set), so a fault can fire on the first start and not after the
gang restarts: keyed on rank and restart count, as the Kubernetes Job and TorchElastic tests inject theirs.
Never set it in production: it exists to prove that nothing is lost when these things happen for real.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer_contract import hooks
from trainer_contract.settings import ConfigError
from trainer_contract.warm_start import launcher_pid

ENV = "FAULT_INJECT"
_ENTRY = re.compile(r"^(?P<action>sigkill|sigkill-pod|sigterm-pod|ledger|exit=\d+|sleep=\d+(\.\d+)?)"
                    r"@(?P<point>start|batch(=\d+\.\d+)?|download|checkpoint(=\d+)?|written=\d+|completed|committed)"
                    r"(?P<filters>(,(rank|attempt|group)=\d+)*)$")


@dataclass(frozen=True)
class Fault:
    action: str
    point: str
    rank: int | None = None
    attempt: int | None = None
    group: int | None = None  # the replica group (REPLICA_GROUP) whose ranks it fires in


def parse(text: str) -> list[Fault]:
    faults, problems = [], []
    for entry in (part.strip().replace(" ", "") for part in text.split(";")):
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if not match:
            problems.append(f"{ENV}: {entry!r} is not ACTION@POINT[,rank=N][,attempt=N][,group=N] "
                            "(see tests/fault_injection/fault_injector.py)")
            continue
        filters = dict(item.split("=") for item in match.group("filters").split(",") if item)
        faults.append(Fault(match.group("action"), match.group("point"),
                            int(filters["rank"]) if "rank" in filters else None,
                            int(filters["attempt"]) if "attempt" in filters else None,
                            int(filters["group"]) if "group" in filters else None))
    if problems:
        raise ConfigError(problems)
    return faults


def count_start(directory: Path, rank: int) -> int:
    """This rank's earlier starts in ``directory``; records this one."""
    directory.mkdir(parents=True, exist_ok=True)
    group = os.environ.get("REPLICA_GROUP")  # a replica group's ranks are counted apart from another's
    path = directory / (f"rank-{rank}.starts" if group is None else f"group{group}-rank-{rank}.starts")
    earlier = int(path.read_text()) if path.exists() else 0
    path.write_text(str(earlier + 1))
    return earlier


class FaultInjector:
    """The faults of FAULT_INJECT that apply to this rank on this start; ``on(point)`` fires them."""

    def __init__(self, faults: list[Fault], rank: int, attempt: int, log: Callable[[str], None],
                 parent_is_launcher: bool = True, output_dir: Path | None = None):
        self.rank, self.attempt, self.log, self.output_dir = rank, attempt, log, output_dir
        group = os.environ.get("REPLICA_GROUP", "").strip()
        self.faults = [f for f in faults if f.rank in (None, rank) and f.attempt in (None, attempt)
                       and (f.group is None or str(f.group) == group)]
        # the "pod" actions signal torchrun (also from a warm worker, whose parent is the warm server); without it
        # (plain `python -m worker`) they act on this process
        self.pod = launcher_pid() if parent_is_launcher else os.getpid()
        self.checkpoints = 0
        self.written = 0
        self.in_checkpoint = False

    def at(self, point: str) -> None:
        for fault in self.faults:
            if fault.point == point:
                self._fire(fault)

    def on(self, name: str, **context) -> None:
        """The worker passed point ``name`` (trainer_contract/hooks.py)."""
        if name == "batch":
            self.at("batch")
            self.at(f"batch={context['epoch']}.{context['batch']}")
        elif name == "checkpoint":
            self.checkpoints += 1
            self.in_checkpoint = True
        elif name == "committed":
            for fault in self.faults:
                if fault.point == "committed" and fault.action == "ledger":
                    self._ledger(context)
                elif fault.point == "committed":
                    self._fire(fault)
        elif name == "checkpoint-written":
            self.written += 1
            self.at(f"written={self.written}")
        elif name == "before-rename":
            if self.in_checkpoint:  # the first file of this checkpoint is written, not yet in place
                self.in_checkpoint = False
                for point in ("checkpoint", f"checkpoint={self.checkpoints}"):
                    self.at(point)
        else:
            self.at(name)

    def _ledger(self, context: dict) -> None:
        assert self.output_dir is not None, "ledger needs the run's OUTPUT_DIR"
        group = os.environ.get("REPLICA_GROUP", "0")
        path = self.output_dir / ".faults" / f"ledger-group{group}-rank{self.rank}.jsonl"
        with path.open("a") as ledger:
            ledger.write(json.dumps({**context, "attempt": self.attempt}) + "\n")

    def _fire(self, fault: Fault) -> None:
        self.log(f"{ENV}: {fault.action} at {fault.point} (attempt {self.attempt})")
        sys.stdout.flush()
        kind, _, argument = fault.action.partition("=")
        if kind == "sleep":
            time.sleep(float(argument))
        elif kind == "exit":
            os._exit(int(argument))
        elif kind == "sigterm-pod":
            os.kill(self.pod, signal.SIGTERM)
        else:
            if kind == "sigkill-pod":
                os.kill(self.pod, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)


class FaultHook:
    """trainer_contract.hooks' hook: at "start" it reads FAULT_INJECT (a malformed value is the worker's configuration
    error, exit 78, so a typo cannot silently test nothing) and builds this rank's injector."""

    def __init__(self, text: str):
        self.text = text
        self.injector: FaultInjector | None = None

    def __call__(self, name: str, **context) -> None:
        if name == "start":
            faults = parse(self.text)
            attempt = count_start(Path(context["output_dir"]) / ".faults", context["rank"]) if faults else 0
            self.injector = FaultInjector(faults, context["rank"], attempt, context["log"],
                                          context["under_launcher"], Path(context["output_dir"]))
            self.injector.at("start")
        elif self.injector is not None:
            self.injector.on(name, **context)


def install_from_environ() -> None:
    hooks.install(FaultHook(os.environ.get(ENV, "")))
