"""Live metrics while a program trains: trainer_contract/metrics.py's table, served in Prometheus' text format
(prometheus_client) by each pod's local rank 0 on INDEXED_TRAINER_METRICS_PORT. The built-in programs publish
through the process's ``live()`` from their progress reports and checkpoint writes; a program of your own can
publish the same (with the indexed-trainer package installed):

    from trainer_runtime.metrics import live
    metrics = live()                                       # serves where the render set the port; else records
    metrics.started(step=0, output_dir=Path(os.environ["OUTPUT_DIR"]))
    metrics.progress(step, steps=500, epoch=1, epochs=3)   # and the ETA, from this start's pace
    metrics.loss(0.42); metrics.evaluation("accuracy", 0.97); metrics.throughput(1800, "samples")
    metrics.checkpoint(step)

A port already taken (two nodes of a test cluster on one machine) or prometheus_client missing costs the
endpoint, never the training: one line says so.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer_contract import checkpoint_layout as layout
from trainer_contract.atomic import atomic_write
from trainer_contract.gang_ledger import DIRECTORY as GANG_DIRECTORY
from trainer_contract.gang_ledger import notes_root
from trainer_contract.gang_rounds import GangRounds, in_place_settings, job_identity
from trainer_contract.gang_timeline import totals
from trainer_contract.metrics import ADDRESS_VARIABLE, METRICS, PATH, PORT_VARIABLE, PREFIX
from trainer_runtime.goodput import goodput_account

# Where each node counts the starts of the run in OUTPUT_DIR (node<N>: a count), which a new run's set-aside
# (RESUME=false) moves with the rest of the old run.
STARTS_DIRECTORY = ".starts"

_lock = threading.Lock()
_live: Live | None = None


def live(environ: Mapping[str, str] | None = None, log: Callable[[str], None] | None = None) -> Live:
    """This process's metrics, made on first use from ``environ``: served when PORT_VARIABLE is set and this is
    its node's local rank 0."""
    global _live
    with _lock:
        if _live is None:
            environ = os.environ if environ is None else environ
            text = environ.get(PORT_VARIABLE, "").strip()
            node_leader = environ.get("LOCAL_RANK", "0") == "0"
            serves = text.isdigit() and 0 < int(text) < 65536 and node_leader
            _live = Live(int(text) if serves else None, log or _say(environ), counts_starts=node_leader,
                         address=environ.get(ADDRESS_VARIABLE, "").strip())
        return _live


def _say(environ: Mapping[str, str]) -> Callable[[str], None]:
    rank = environ.get("RANK", "0")

    def say(message: str) -> None:
        sys.stdout.write(f"Rank {rank}: {message}\n")
        sys.stdout.flush()
    return say


class Live:
    """The gauges of METRICS in a registry of their own, and their server (None: recorded, not served)."""

    def __init__(self, port: int | None, log: Callable[[str], None], *, counts_starts: bool = True,
                 address: str = ""):
        self.log, self.counts_starts, self.address = log, counts_starts, address
        self.port: int | None = None  # where it is served, once it is
        self.began, self.steps_before, self.steps_per_epoch = time.monotonic(), 0, 0
        self._gauges: dict[str, Any] = {}
        self._server: Any = None
        try:
            from prometheus_client import CollectorRegistry, Gauge
        except ImportError:
            if port is not None:
                log(f"metrics: prometheus_client is not installed: nothing served on port {port} "
                    "(pip install 'indexed-trainer[worker]')")
            return
        self.registry, self._gauge = CollectorRegistry(), Gauge
        if port is not None:
            self._serve(port)

    def _serve(self, port: int) -> None:
        from trainer_runtime.metrics_server import serve

        try:
            self._server = serve(self.registry, port, self.address)
        except OSError as error:
            self.log(f"metrics: cannot serve on port {port} ({error.strerror or error}): training goes on without "
                     "them")
            return
        self.port = port
        host = self.address or "0.0.0.0"
        self.log(f"metrics: serving http://{f'[{host}]' if ':' in host else host}:{port}{PATH} (Prometheus' format)")

    def _set(self, name: str, value: float, **labels: str) -> None:
        """A gauge is registered when first set: a scrape shows what is known, never a 0 that means nothing yet."""
        if not hasattr(self, "registry"):
            return  # prometheus_client is missing
        gauge = self._gauges.get(name)
        if gauge is None:
            text, label_names = METRICS[name]
            gauge = self._gauges[name] = self._gauge(PREFIX + name, text, label_names, registry=self.registry)
        (gauge.labels(**labels) if labels else gauge).set(value)

    def started(self, step: int, *, output_dir: Path | None = None, node: int = 0,
                steps_per_epoch: int = 0) -> None:
        """Training starts or resumes at ``step``: the clock of the ETA; ``output_dir``: where this node counts
        its starts (restarts); ``steps_per_epoch``: how checkpoints named by epoch and step count their step."""
        self.began, self.steps_before, self.steps_per_epoch = time.monotonic(), step, steps_per_epoch
        self._set("step", step)
        if output_dir is not None and self.counts_starts:  # one count per node: its local rank 0's
            self._set("restarts", count_start(output_dir / STARTS_DIRECTORY / f"node{node}"))
            self._failed_rounds(output_dir)
        account = goodput_account()
        account.resumed(self.log)  # rank 0 of a round restarted in place: the fault it recovers from
        for kind in {fault.kind for fault in account.faults}:
            self._set("faults", sum(fault.kind == kind for fault in account.faults), kind=kind)
        for phase, seconds in (totals(account.faults).items() if account.faults else ()):
            self._set("fault_seconds", seconds, phase=phase)
        self._goodput()

    def _goodput(self) -> None:
        goodput = goodput_account().goodput()
        if goodput is not None:
            self._set("goodput_ratio", goodput)

    def _failed_rounds(self, output_dir: Path, environ: Mapping[str, str] = os.environ) -> None:
        """Where the launcher restarts rounds in place: the Job's failed rounds so far, counted and not (faults
        after progress), as the launchers judged them, and those in a row that max_restarts bounds
        (trainer_contract/gang_rounds.py)."""
        in_place, limit = in_place_settings(environ)
        job = job_identity(environ)
        root = notes_root(output_dir, environ)
        if not in_place or job is None or not (root / GANG_DIRECTORY).is_dir():
            return
        rounds = GangRounds(root, 0, "", job)
        verdicts = rounds.verdicts()
        self._set("failed_rounds", sum(verdicts), counted="true")
        self._set("failed_rounds", len(verdicts) - sum(verdicts), counted="false")
        self._set("failed_rounds_in_a_row", rounds.failures())
        self._set("max_restarts", limit)

    def progress(self, step: int, *, steps: int, epoch: int | None = None, epochs: int | None = None) -> None:
        """Optimizer step ``step`` of ``steps`` done (epochs from 1); the ETA at this start's pace."""
        self._set("step", step)
        self._set("steps_planned", steps)
        if epoch is not None:
            self._set("epoch", epoch)
        if epochs is not None:
            self._set("epochs_planned", epochs)
        done, elapsed = step - self.steps_before, time.monotonic() - self.began
        if step >= steps:
            self._set("eta_seconds", 0)
        elif done > 0:
            self._set("eta_seconds", elapsed / done * (steps - step))
        self._memory()
        self._goodput()

    def loss(self, value: float) -> None:
        self._set("loss", value)

    def evaluation(self, metric: str, value: float) -> None:
        self._set("evaluation", value, metric=metric)

    def throughput(self, per_second: float, unit: str) -> None:
        self._set("throughput_per_second", per_second, unit=unit)

    def quorum(self, participants: int, attempted: int, committed: int) -> None:
        """A replica group's step: the groups in its quorum, and this group's steps so far."""
        self._set("replica_groups_participating", participants)
        self._set("replica_group_steps", committed, committed="true")
        self._set("replica_group_steps", attempted - committed, committed="false")

    def checkpoint(self, step: int) -> None:
        self._set("last_checkpoint_step", step)
        self._set("last_checkpoint_timestamp_seconds", time.time())

    def checkpoint_written(self, path: Path) -> None:
        """A checkpoint named by either naming rule (checkpoint_layout) is whole: its step, from its name."""
        optimizer_step = layout.OPTIMIZER_STEP.order(path.name)
        position = layout.position_of(path.name)
        if optimizer_step is not None:
            self.checkpoint(optimizer_step[0])
        elif position is not None:
            self.checkpoint(position.epoch * self.steps_per_epoch + position.step)

    def _memory(self) -> None:
        self._set("peak_memory_bytes", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, device="cpu")
        torch = sys.modules.get("torch")  # never imported here: a program of one's own may not use it
        if torch is not None and torch.cuda.is_initialized():
            self._set("peak_memory_bytes", torch.cuda.max_memory_allocated(), device="cuda")

    def close(self) -> None:
        """Stop serving. The process is ending: its serving loop is told to stop without waiting for it to notice
        (up to its 0.5 s poll), which only delayed a round restarted in place; the port is free at the exit."""
        server, self._server = self._server, None
        if server is not None:
            def stop() -> None:
                server.shutdown()
                server.server_close()

            threading.Thread(target=stop, name="metrics-shutdown", daemon=True).start()


def count_start(path: Path) -> int:
    """How many starts ``path`` counted before this one, which it counts (a damaged count starts again at 0)."""
    try:
        before = int(path.read_text().strip())
    except (OSError, ValueError):
        before = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, f"{before + 1}\n".encode())
    except OSError:
        pass  # a read-only volume: the count is lost, not the run
    return before
