"""Recovery in place under local-job, phase by phase, against the Job's own start-up in the same run.

Two faults, each from batch 3 of epoch 2 on (epoch 1's checkpoint on the volume) once every pod's warm-worker server
is ready (trainer_launcher/warm_workers.py; warming at the first checkpoint here, not 30 s after it), on index 1
of a gang of ``world`` pods of one process each, and a killed worker again with warm workers off (side by side):

- ``process``: the worker process of pod 1 SIGKILLed (out of memory, a segfault); its launcher stays: the round
  restarts in the same pods.
- ``pod``: every process of pod 1 SIGKILLed (its node lost); the Job recreates pod 1 after the controller's
  back-off (``--backoff-seconds``, reported apart) while pod 0 waits in place.

The reference is the start-up, launch to first step of the same Job under local-job (what a recovery that
recreated every pod would pay again, back-off aside).

    python -m bench.recovery [--quick] [--repeats N] [--worlds 2 4]
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.digits import default_data_dir
from bench.local_job_timeline import claim, local_job, local_job_start, manifests, timeline
from bench.stats import BIN, clean_env, in_scratch, mnist_bench_parser, render_rows, say_machine, verdict

# what each measured recovery is: the fault, and whether warm workers are on (the default)
VARIANTS = {"process": ("process", True), "process_cold": ("process", False), "pod": ("pod", True)}
BACKOFF_SECONDS = 1.0
TARGETS = {"process": 0.3, "pod": 0.6}  # recovery (minus the back-off) over start-up, warm workers on
EPOCHS = 200  # room for the warm-worker servers to get ready before the kill; the run ends at the first step after it


def recovery(data_dir: Path, world: int, fault: str, warm: bool = True, backoff: float = BACKOFF_SECONDS) -> dict:
    """Seconds from the kill: rank 0 detects it, index 0's launcher opens the next round, (pod) the replacement
    starts after the back-off, rank 0 resumes, the checkpoint is restored, the first step after it. ``warm``: the
    pods' warm-worker servers (trainer_launcher/warm_workers.py) warm up at the first checkpoint and the kill waits
    until every one is ready; else warm workers are off and the kill comes at batch 3 of epoch 2."""
    directory = Path(tempfile.mkdtemp(prefix=f"bench-recovery-{fault}-"))
    switch = f"warm_workers_after_seconds={0 if warm else 'null'}"
    command = local_job(manifests(world, directory, f"config_map.EPOCHS={EPOCHS}", "config_map.BATCH_SIZE=32",
                                  switch), claim(data_dir, directory), directory, backoff)
    killed: dict[str, float] = {}
    servers_ready: set[str] = set()

    def kill_when_ready(line: str) -> bool:
        ready = re.search(r"\[mnist-train-(\d+)-\w+\] launcher: warm workers ready", line)
        if ready:
            servers_ready.add(ready.group(1))
        step = re.search(rf"Rank 0: epoch: (\d+)/{EPOCHS}, batch: (\d+)/", line)
        if killed or step is None or (int(step.group(1)), int(step.group(2))) < (2, 3):
            return False
        if warm and len(servers_ready) < world:
            return False
        kill_index(1, whole_pod=fault == "pod", root=directory / "root")  # this run's pod, not another local-job's
        killed["at"] = time.perf_counter()
        return True

    seen: dict[str, float] = {}
    events = {
        "killed": kill_when_ready,
        "detected": lambda line: bool(killed) and re.search(r"\[mnist-train-0-\w+\] Rank 0: error: (lost contact|a peer)",
                                                            line) is not None,
        "round": lambda line: bool(killed) and re.search(r"\[mnist-train-0-\w+\].*launcher: round 2 of the gang", line)
        is not None,
        "pod_failed": lambda line: bool(killed) and re.search(r"local-job: pod mnist-train-1-\w+ failed", line) is not None,
        "replaced": lambda line: bool(killed) and "local-job: started pod mnist-train-1-" in line,
        "resuming": lambda line: bool(killed) and "Rank 0: resuming from" in line,
        "restored": lambda line: bool(killed) and "Rank 0: restored" in line,
        "first_step": lambda line: bool(killed) and re.search(r"Rank 0: epoch: \d+/\d+, batch:", line) is not None
        and "restored" in seen,
    }
    marks = timeline(command, clean_env(PATH=f"{BIN}:{os.environ['PATH']}"), events, until="first_step",
                     timeout=600, seen=seen)
    at = {name: marks[name] - marks["killed"] for name in marks if name != "killed"}
    if fault == "pod" and "replaced" not in at:
        raise RuntimeError(f"pod 1 was never replaced; saw {sorted(at)}")
    backoff_s = at["replaced"] - at["pod_failed"] if fault == "pod" else 0.0
    # the gang can start once index 0 opened the round and (a lost pod) the replacement started
    ready = max(at["round"], at.get("replaced", 0.0))
    return {"detection_s": at["detected"], "round_s": at["round"] - at["detected"], "backoff_s": backoff_s,
            "startup_s": at["resuming"] - ready, "restore_s": at["restored"] - at["resuming"],
            "first_step_s": at["first_step"] - at["restored"], "total_s": at["first_step"],
            "total_without_backoff_s": at["first_step"] - backoff_s}


def kill_index(index: int, whole_pod: bool, root: Path) -> int:
    """SIGKILL the running pod of completion ``index`` of the local-job whose volume root is ``root``: every process
    of it, or only its workers (not the launcher, ``python -m worker.launch``); how many processes it killed."""
    from localjob.processes import pids_of_pods_named

    killed = 0
    for pid in pids_of_pods_named(f"mnist-train-{index}-", root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read()
            # the pod's own processes: its launcher and its warm-worker server (trainer_launcher/warm_workers.py)
            if whole_pod or not (b"worker.launch" in command or b"trainer_launcher.warm_workers" in command):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed


def measure(data_dir: Path, quick: bool, repeats: int, worlds: tuple[int, ...] = (2, 4)) -> dict:
    """Per world size: the start-up (median) and each fault's recovery (median of the phases), alternating."""
    results: dict = {}
    for world in (2,) if quick else worlds:
        # the quick mode checks the code: warm workers off is the same measurement with another switch
        variants = {name: how for name, how in VARIANTS.items() if not (quick and name == "process_cold")}
        runs: dict[str, list[dict]] = {"startup": [], **{variant: [] for variant in variants}}
        for _ in range(1 if quick else repeats):
            runs["startup"].append(local_job_start(data_dir, world))
            for variant, (fault, warm) in variants.items():
                runs[variant].append(recovery(data_dir, world, fault, warm))
        results[f"ws{world}"] = {name: {key: statistics.median(run[key] for run in samples) for key in samples[0]}
                                 for name, samples in runs.items()}
    return results


WHAT = {"process": "a killed worker process", "process_cold": "a killed worker process, warm workers off",
        "pod": "a pod lost whole, minus the back-off"}


def rows(results: dict) -> list[tuple[str, str, str, str, str]]:
    table = []
    for key, measured in results.items():
        startup = measured["startup"]["first_step_s"]
        for variant in (name for name in VARIANTS if name in measured):  # results kept from before a variant was
            rec = measured[variant]
            ratio = rec["total_without_backoff_s"] / startup
            target = TARGETS.get(variant)
            table.append((f"recovery in place from {WHAT[variant]}, local-job, {key.replace('ws', 'ws ')} (s)",
                          f"{rec['total_without_backoff_s']:.2f}", f"{startup:.2f} (launch to first step)",
                          f"{ratio:.2f}", verdict(ratio, target, True) if target else "(the default's baseline)"))
            table.append(("  phases: detection / round opened / back-off / start-up / restore / first step (s)",
                          " / ".join(f"{rec[k]:.2f}" for k in ("detection_s", "round_s", "backoff_s", "startup_s",
                                                                "restore_s", "first_step_s")),
                          f"back-off: the controller's (--backoff-seconds {BACKOFF_SECONDS:g})" if variant == "pod"
                          else "", "", ""))
    return table


@in_scratch
def main(argv: list[str] | None = None) -> int:
    parser = mnist_bench_parser("python -m bench.recovery", __doc__, "world size 2, once", 3)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args(argv)
    results = measure(args.data_dir or default_data_dir(), args.quick, args.repeats, tuple(args.worlds))
    print(render_rows(rows(results)))
    say_machine()
    return 0


if __name__ == "__main__":
    sys.exit(main())
