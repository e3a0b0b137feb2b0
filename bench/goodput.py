"""Goodput under faults: the default MNIST job under local-job, clean and under a fault every N seconds, side by side
(alternating rounds, medians).

    python -m bench.goodput                    # the figures of docs/performance.md (a fault per 60 s and per 20 s)
    python -m bench.goodput --quick            # a short run with a fault every few seconds (the test suite runs it)
    python -m bench.goodput --replica-groups   # 3 pods as one gang and as 3 replica groups, side by side

Faults come in turn, from the first training step on, every ``--interval`` seconds, on each index in turn from the
highest (index 1 then index 0 for 2 pods):

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

With ``--replica-groups`` the same schedules hit the job of 3 pods twice, alternating: as one gang (today's restart
of the whole gang) and as 3 replica groups (fault_tolerance.replica_groups: the fault costs its group, the others
step on). Targets for the groups (issue 78): goodput >= 0.97 at a fault per 60 s, >= 0.9 at one per 20 s, the
accuracy within the clean run's band, and a clean run's time at most 1/0.95 of the gang's (torchft's quorum per
step is not free). The runtime's own goodput is the gang's (model.json); for the groups it is the bench's alone.
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
from dataclasses import dataclass
from pathlib import Path

from bench.digits import default_data_dir
from bench.local_job_timeline import claim, follow, local_job, manifests
from bench.recovery import kill_index
from bench.stats import BIN, clean_env, in_scratch, mnist_bench_parser, render_rows, say_machine, verdict
from trainer_contract.gang_timeline import PHASES

KINDS = ("worker", "preempt", "lost")
TARGETS = {60.0: 0.95, 20.0: 0.90}  # goodput at one fault per N seconds
BACKOFF_SECONDS = 10.0  # the Job controller's (DefaultJobPodFailureBackOff)
ACCURACY_BAND = 0.01
MAX_RESTARTS = 100


@dataclass(frozen=True)
class Mode:
    """A shape of the job the schedules hit: its pods, its values, and its log's marks."""

    name: str  # its key in the results
    label: str  # its rows' words
    pods: int
    sets: tuple[str, ...]
    training: re.Pattern  # the first step logged: training has begun
    recovered: re.Pattern  # rank 0 of the faulted pod trains again (the paced schedule waits for it)
    targets: dict[float, float]
    # every epoch evaluated, from the log (each group's rank 0 says each epoch it ends); None: the gang's
    # metrics.jsonl, which must hold every epoch once
    epoch_done: re.Pattern | None = None
    # whose account model.json's goodput and faults.jsonl's phases are: the gang's, or one group's of its own faults
    # (a group's "recompute" is its catching up with the others, which never stopped)
    accounts: str = "the runtime's own account (model.json)"


GANG = Mode("gang", "MNIST 2 pods", 2, (), re.compile(r"Rank 0: epoch: \d+/\d+, batch: \d+/"), re.compile(r"Rank 0: fault \d+: "),
            TARGETS)
GROUPS_COMPARED = (
    Mode("gang", "MNIST 3 pods, one gang", 3, (), GANG.training, GANG.recovered, TARGETS),
    Mode("groups", "MNIST 3 pods, 3 replica groups", 3, ("fault_tolerance.replica_groups=true",),
         re.compile(r"Rank 0: step \d+/\d+ \(epoch"), re.compile(r"Rank 0: group\d+ joined at step"),
         {60.0: 0.97, 20.0: 0.90}, re.compile(r"Rank 0: epoch (\d+)/\d+, test accuracy="),
         "the writing group's own account of its faults, not the job's (model.json)"),
)
CLEAN_SPEED_TARGET = 0.95  # a clean run of the groups against the gang's: the quorum per step's cost


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
    """From the first step on, one fault every ``interval`` seconds, the kinds in turn, each index in turn from the
    highest; at most
    ``most``; with ``paced``, each next one only ``interval`` seconds after the gang recovered from the last (the
    quick mode: every kind tried once, on any machine's pace)."""

    def __init__(self, interval: float, kinds: tuple[str, ...], root: Path, most: int | None = None,
                 paced: bool = False, pods: int = 2):
        super().__init__(name="fault-schedule", daemon=True)
        self.interval, self.kinds, self.root, self.most, self.paced = interval, kinds, root, most, paced
        self.pods = pods
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
            kind, index = self.kinds[number % len(self.kinds)], self.pods - 1 - number % self.pods
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
        most: int | None = None, mode: Mode = GANG) -> dict:
    """One run of the job (``mode``) under local-job, with a fault every ``interval`` seconds (None: clean)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-goodput-"))
    volume = claim(data_dir, directory)
    # max_restarts: the Job controller counts a pod killed whole (no DisruptionTarget) whatever the progress
    # (docs/reliability.md); the schedule's lost pods would spend the default 3 within a minute
    command = local_job(manifests(mode.pods, directory, f"config_map.EPOCHS={epochs}", "config_map.LOG_INTERVAL=10",
                                  f"max_restarts={MAX_RESTARTS}", *mode.sets), volume, directory, backoff)
    schedule = Schedule(interval, kinds, directory / "root", most, paced=most is not None, pods=mode.pods) \
        if interval else None
    first, end, completed, epochs_done = _follow(command, directory / "local-job.log", mode, schedule)
    output = volume / "runs" / "mnist-train"
    summary = json.loads((output / "model.json").read_text()) if (output / "model.json").exists() else {}
    return {"log": str(directory / "local-job.log"), "train_s": (end or 0.0) - (first or 0.0),
            "completed": completed and bool(summary),
            "accuracy": summary.get("accuracy"), "goodput": summary.get("goodput"), "faults": read_faults(output),
            "delivered": [kind for _, kind, _ in schedule.delivered] if schedule else [],
            "missed": schedule.missed if schedule else 0,
            "epochs_ok": (sorted(epochs_done) if mode.epoch_done else recorded_epochs(output)) == list(
                range(1, epochs + 1))}


def _follow(command: list[str], log_path: Path, mode: Mode, schedule: Schedule | None):
    """local-job's lines as they come, the schedule started at the first step: (seconds to the first step, to the
    end, whether training completed, the epochs whose end was said)."""
    if schedule:
        schedule.start()
    first = end = None
    completed = False
    epochs_done: set[int] = set()
    with log_path.open("w") as log:  # what happened, for a run that did not complete
        for elapsed, line in follow(command, clean_env(PATH=f"{BIN}:{os.environ['PATH']}"), timeout=3600):
            log.write(line)
            if first is None and mode.training.search(line):
                first = elapsed
                if schedule:
                    schedule.began.set()
            if schedule and mode.recovered.search(line):
                schedule.recovered.release()
            if "Rank 0: training completed." in line:
                completed = True
            if mode.epoch_done and (done := mode.epoch_done.search(line)) is not None:
                epochs_done.add(int(done.group(1)))
            end = elapsed
    if schedule:
        schedule.done.set()
        schedule.began.set()
    return first, end, completed, epochs_done


def recorded_epochs(output: Path) -> list[int]:
    path = output / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["epoch"] for line in path.read_text().splitlines() if line.strip()]


def read_faults(output: Path) -> list[dict]:
    """The runtime's account of each fault (trainer_contract/gang_timeline.py), for the Job local-job ran: the
    gang's, or each replica group's (its own notes: OUTPUT_DIR/.groups/<index>/.gang)."""
    lines = []
    for path in sorted([*output.glob(".gang/timeline/*/faults.jsonl"),
                        *output.glob(".groups/*/.gang/timeline/*/faults.jsonl")]):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def measure(data_dir: Path, quick: bool, repeats: int | None = None, intervals: tuple[float, ...] | None = None,
            backoff: float | None = None, modes: tuple[Mode, ...] = (GANG,)) -> dict:
    size = sizes(quick)
    intervals = intervals or size["intervals"]
    backoff = size["backoff"] if backoff is None else backoff
    runs: dict[str, dict[str, list[dict]]] = {
        mode.name: {"clean": [], **{f"{interval:g}": [] for interval in intervals}} for mode in modes}
    for _ in range(repeats or size["repeats"]):  # alternating: the machine's drift hits every contender alike
        for mode in modes:
            runs[mode.name]["clean"].append(run(data_dir, size["epochs"], None, size["kinds"], backoff, mode=mode))
            for interval in intervals:
                runs[mode.name][f"{interval:g}"].append(run(data_dir, size["epochs"], interval, size["kinds"], backoff,
                                                            size["faults"], mode=mode))
    return {"epochs": size["epochs"], "backoff": backoff, "runs": runs}


def summarize(results: dict) -> dict:
    """Each mode's schedules against its own clean runs; with two modes, the second's clean speed against the
    first's."""
    out = {name: _summarize_mode(runs) for name, runs in results["runs"].items()}
    if len(out) == 2:
        first, second = out.values()
        out["clean_speed_ratio"] = first["clean_train_s"] / second["clean_train_s"]
    return out


def _summarize_mode(results: dict[str, list[dict]]) -> dict:
    clean = results["clean"]
    clean_s = statistics.median(run["train_s"] for run in clean)
    clean_accuracy = statistics.median(run["accuracy"] or 0.0 for run in clean)
    out: dict = {"clean_train_s": clean_s, "clean_accuracy": clean_accuracy, "schedules": {}}
    for key, runs in results.items():
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


def rows(summary: dict, backoff: float, modes: tuple[Mode, ...] = (GANG,)) -> list[tuple[str, str, str, str, str]]:
    table = [("measure", "under faults", "clean", "ratio", "target")]
    for mode in modes:
        table += _mode_rows(summary[mode.name], backoff, mode)
    if "clean_speed_ratio" in summary:
        first, second = (summary[mode.name]["clean_train_s"] for mode in modes)
        table.append((f"a clean run, {modes[1].label} against {modes[0].label} (its time / theirs)", f"{second:.1f} s",
                      f"{first:.1f} s", f"{summary['clean_speed_ratio']:.2f}",
                      verdict(summary["clean_speed_ratio"], CLEAN_SPEED_TARGET, False)))
    return table


def _mode_rows(summary: dict, backoff: float, mode: Mode) -> list[tuple[str, str, str, str, str]]:
    table = []
    for key, schedule in summary["schedules"].items():
        target = mode.targets.get(float(key))
        external = schedule["goodput_external"]
        runtime = schedule["goodput_runtime"]
        table.append((f"goodput, a fault every {key} s, {mode.label} (clean time / faulted time)",
                      f"{schedule['train_s']:.1f} s ({schedule['faults_per_run']:.0f} faults)",
                      f"{summary['clean_train_s']:.1f} s (clean)", f"{external:.2f}",
                      verdict(external, target, False) if target else "–"))
        table.append((f"  goodput by {mode.accounts}", f"{runtime:.2f}" if runtime is not None
                      else "none", "", "", ""))
        table.append(("  nothing lost (every epoch, accuracy within 0.01 of clean)",
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
    parser.add_argument("--replica-groups", action="store_true",
                        help="3 pods as one gang and as 3 replica groups, side by side (issue 78's targets)")
    args = parser.parse_args(argv)
    modes = GROUPS_COMPARED if args.replica_groups else (GANG,)
    results = measure(args.data_dir or default_data_dir(), args.quick, args.repeats,
                      tuple(args.intervals) if args.intervals else None, args.backoff_seconds, modes)
    summary = summarize(results)
    if args.json:
        args.json.write_text(json.dumps({"results": results, "summary": summary}, indent=2))
    print(render_rows(rows(summary, results["backoff"], modes)))
    say_machine()
    return 0


if __name__ == "__main__":
    sys.exit(main())
