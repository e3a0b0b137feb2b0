"""Goodput under faults: the default MNIST job under local-job, clean and under a fault every N seconds, side by side
(alternating rounds, medians).

    python -m bench.goodput                    # the figures of docs/performance.md (a fault per 60 s and per 20 s)
    python -m bench.goodput --quick            # a short run with a fault every few seconds (the test suite runs it)

Faults come in turn, from the first training step on, every ``--interval`` seconds, on index 1 then index 0:

- ``worker``: the pod's worker processes SIGKILLed (out of memory, a segfault); the launcher restarts the round in
  place;
- ``preempt``: the pod evicted through `local-job evict` (the DisruptionTarget condition: a preemption, a drain);
  the gang checkpoints, the pod ends, the Job recreates it after the controller's back-off;
- ``lost``: every process of the pod SIGKILLed (its node lost); the Job recreates it after the back-off.

For each run: goodput two ways, the runtime's own (model.json's ``goodput``: 1 - the faults' lost seconds over the
wall time since the first step, trainer_contract/gang_timeline.py) and the bench's (the clean run's time from the
first step to the end over the faulted run's); the cost of each fault kind (the runtime's faults.jsonl, by phase,
and the controller's back-off apart); and whether anything was lost (every epoch recorded once, the test accuracy
within 0.01 of the clean run's). Targets: goodput >= 0.95 at a fault per 60 s, >= 0.9 at one per 20 s.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.digits import default_data_dir
from bench.local_job_timeline import claim, follow, local_job, manifests
from bench.recovery import kill_index
from bench.stats import BIN, clean_env, in_scratch, mnist_bench_parser, render_rows, say_machine, verdict
from trainer_contract.gang_timeline import PHASES

KINDS = ("worker", "preempt", "lost")
TARGETS = {60.0: 0.95, 20.0: 0.90}  # goodput at one fault per N seconds
BACKOFF_SECONDS = 10.0  # the Job controller's (DefaultJobPodFailureBackOff)
RECOVERED = re.compile(r"Rank 0: fault \d+: ")  # rank 0 accounted for a fault: it trains again
TRAINING = re.compile(r"Rank 0: epoch: \d+/\d+, batch: \d+/")  # the first batch logged: training has begun
ACCURACY_BAND = 0.01
MAX_RESTARTS = 100


def sizes(quick: bool) -> dict:
    if quick:
        # one fault of each kind, spaced wider than a recovery takes here: the wiring, not the figures
        return {"epochs": 30, "intervals": (3.0,), "repeats": 1, "kinds": KINDS, "backoff": 1.0, "faults": 3}
    return {"epochs": 24, "intervals": (60.0, 20.0), "repeats": 3, "kinds": KINDS, "backoff": BACKOFF_SECONDS,
            "faults": None}


def evict(root: Path, index: int) -> bool:
    result = subprocess.run([str(BIN / "local-job"), "evict", "--volume-root", str(root), str(index)],
                            capture_output=True, text=True, timeout=120)
    return result.returncode == 0


class Schedule(threading.Thread):
    """From the first step on, one fault every ``interval`` seconds, the kinds in turn, index 1 then 0; at most
    ``most``; with ``paced``, each next one only ``interval`` seconds after the gang recovered from the last (the
    quick mode: every kind tried once, on any machine's pace)."""

    def __init__(self, interval: float, kinds: tuple[str, ...], root: Path, most: int | None = None,
                 paced: bool = False):
        super().__init__(name="fault-schedule", daemon=True)
        self.interval, self.kinds, self.root, self.most, self.paced = interval, kinds, root, most, paced
        self.began = threading.Event()
        self.recovered = threading.Semaphore(0)  # released at each "fault N:" line: rank 0 trains again
        self.done = threading.Event()
        self.delivered: list[tuple[float, str, int]] = []  # (seconds after the first step, kind, index)
        self.missed = 0  # the pod was not there (waiting out its back-off): nothing to hit

    def run(self) -> None:
        self.began.wait()
        start = clock = time.monotonic()
        number = 0
        while self.most is None or number < self.most:
            if self.done.wait(clock + self.interval - time.monotonic() if self.paced
                              else start + (number + 1) * self.interval - time.monotonic()):
                return
            kind, index = self.kinds[number % len(self.kinds)], 1 - number % 2
            number += 1
            hit = evict(self.root, index) if kind == "preempt" else kill_index(index, whole_pod=kind == "lost", root=self.root) > 0
            if hit:
                self.delivered.append((time.monotonic() - start, kind, index))
            else:
                self.missed += 1
            if self.paced:
                while not self.recovered.acquire(timeout=1.0):
                    if self.done.is_set():
                        return
                clock = time.monotonic()


def run(data_dir: Path, epochs: int, interval: float | None, kinds: tuple[str, ...], backoff: float,
        most: int | None = None) -> dict:
    """One run of the default job (2 pods) under local-job, with a fault every ``interval`` seconds (None: clean)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-goodput-"))
    volume = claim(data_dir, directory)
    # max_restarts: the Job controller counts a pod killed whole (no DisruptionTarget) whatever the progress
    # (docs/reliability.md); the schedule's lost pods would spend the default 3 within a minute
    command = local_job(manifests(2, directory, f"config_map.EPOCHS={epochs}", "config_map.LOG_INTERVAL=10",
                                  f"max_restarts={MAX_RESTARTS}"), volume, directory, backoff)
    schedule = Schedule(interval, kinds, directory / "root", most, paced=most is not None) if interval else None
    if schedule:
        schedule.start()
    first = end = None
    completed = False
    log = (directory / "local-job.log").open("w")  # what happened, for a run that did not complete
    for elapsed, line in follow(command, clean_env(PATH=f"{BIN}:{os.environ['PATH']}"), timeout=3600):
        log.write(line)
        if first is None and TRAINING.search(line):
            first = elapsed
            if schedule:
                schedule.began.set()
        if schedule and RECOVERED.search(line):
            schedule.recovered.release()
        if "Rank 0: training completed." in line:
            completed = True
        end = elapsed
    log.close()
    if schedule:
        schedule.done.set()
        schedule.began.set()
    output = volume / "runs" / "mnist-train"
    summary = json.loads((output / "model.json").read_text()) if (output / "model.json").exists() else {}
    epochs_recorded = recorded_epochs(output)
    faults = read_faults(directory / "root", output)
    return {"log": str(directory / "local-job.log"), "train_s": (end or 0.0) - (first or 0.0),
            "completed": completed and bool(summary),
            "accuracy": summary.get("accuracy"), "goodput": summary.get("goodput"), "faults": faults,
            "delivered": [kind for _, kind, _ in schedule.delivered] if schedule else [],
            "missed": schedule.missed if schedule else 0, "epochs_ok": epochs_recorded == list(range(1, epochs + 1))}


def recorded_epochs(output: Path) -> list[int]:
    path = output / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["epoch"] for line in path.read_text().splitlines() if line.strip()]


def read_faults(root: Path, output: Path) -> list[dict]:
    """The runtime's account of each fault (trainer_contract/gang_timeline.py), for the Job local-job ran."""
    lines = []
    for path in sorted((output / ".gang" / "timeline").glob("*/faults.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def measure(data_dir: Path, quick: bool, repeats: int | None = None, intervals: tuple[float, ...] | None = None,
            backoff: float | None = None) -> dict:
    size = sizes(quick)
    intervals = intervals or size["intervals"]
    backoff = size["backoff"] if backoff is None else backoff
    runs: dict[str, list[dict]] = {"clean": [], **{f"{interval:g}": [] for interval in intervals}}
    for _ in range(repeats or size["repeats"]):  # alternating: the machine's drift hits every contender alike
        runs["clean"].append(run(data_dir, size["epochs"], None, size["kinds"], backoff))
        for interval in intervals:
            runs[f"{interval:g}"].append(run(data_dir, size["epochs"], interval, size["kinds"], backoff,
                                             size["faults"]))
    return {"epochs": size["epochs"], "backoff": backoff, "runs": runs}


def summarize(results: dict) -> dict:
    clean = results["runs"]["clean"]
    clean_s = statistics.median(run["train_s"] for run in clean)
    clean_accuracy = statistics.median(run["accuracy"] or 0.0 for run in clean)
    out: dict = {"clean_train_s": clean_s, "clean_accuracy": clean_accuracy, "schedules": {}}
    for key, runs in results["runs"].items():
        if key == "clean":
            continue
        faults = [fault for run in runs for fault in run["faults"]]
        by_kind: dict[str, dict] = {}
        for kind in sorted({fault["kind"] for fault in faults}):
            chosen = [fault for fault in faults if fault["kind"] == kind]
            by_kind[kind] = {phase: statistics.median(fault[phase] for fault in chosen)
                             for phase in PHASES}
            by_kind[kind]["count"] = len(chosen)
        out["schedules"][key] = {
            "train_s": statistics.median(run["train_s"] for run in runs),
            "goodput_external": statistics.median(clean_s / run["train_s"] for run in runs if run["train_s"] > 0),
            "goodput_runtime": statistics.median(run["goodput"] for run in runs if run["goodput"] is not None)
            if any(run["goodput"] is not None for run in runs) else None,
            "faults_per_run": statistics.median(len(run["delivered"]) for run in runs),
            "missed_per_run": statistics.median(run["missed"] for run in runs),
            "nothing_lost": all(run["completed"] and run["epochs_ok"] and run["accuracy"] is not None
                                and abs(run["accuracy"] - clean_accuracy) <= ACCURACY_BAND for run in runs),
            "by_kind": by_kind,
        }
    return out


def rows(summary: dict, backoff: float) -> list[tuple[str, str, str, str, str]]:
    table = [("measure", "under faults", "clean", "ratio", "target")]
    for key, schedule in summary["schedules"].items():
        interval = float(key)
        target = TARGETS.get(interval)
        external = schedule["goodput_external"]
        runtime = schedule["goodput_runtime"]
        table.append((f"goodput, a fault every {key} s, MNIST 2 pods (clean time / faulted time)",
                      f"{schedule['train_s']:.1f} s ({schedule['faults_per_run']:.0f} faults)",
                      f"{summary['clean_train_s']:.1f} s (clean)", f"{external:.2f}",
                      verdict(external, target, False) if target else "–"))
        table.append(("  goodput as the runtime measured it (model.json)", f"{runtime:.2f}" if runtime is not None
                      else "none", "", "", ""))
        table.append(("  nothing lost (every epoch once, accuracy within 0.01 of clean)",
                      "yes" if schedule["nothing_lost"] else "NO", f"{summary['clean_accuracy']:.4f} (clean)", "", ""))
        for kind, cost in schedule["by_kind"].items():
            table.append((f"  {kind}: {' / '.join(PHASES)} (s), median of {cost['count']}",
                          " / ".join(f"{cost[phase]:.2f}" for phase in PHASES),
                          f"back-off {backoff:g} s doubling per failure of the index" if kind != "worker failed"
                          else "", "", ""))
    return table


@in_scratch
def main(argv: list[str] | None = None) -> int:
    parser = mnist_bench_parser("python -m bench.goodput", __doc__, "a short run, three faults, each 3 s after the last recovery, once", None)
    parser.add_argument("--intervals", type=float, nargs="+", help="seconds between faults (default: 60 20)")
    parser.add_argument("--backoff-seconds", type=float,
                        help=f"the Job controller's back-off local-job applies (default {BACKOFF_SECONDS:g})")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args(argv)
    results = measure(args.data_dir or default_data_dir(), args.quick, args.repeats,
                      tuple(args.intervals) if args.intervals else None, args.backoff_seconds)
    summary = summarize(results)
    if args.json:
        args.json.write_text(json.dumps({"results": results, "summary": summary}, indent=2))
    print(render_rows(rows(summary, results["backoff"])))
    say_machine()
    return 0


if __name__ == "__main__":
    sys.exit(main())
