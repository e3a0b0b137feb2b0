"""Recovery in place under local-job, phase by phase, against the Job's own start-up in the same run.

Two faults, each at batch 3 of epoch 2 (epoch 1's checkpoint on the volume), on index 1 of a gang of ``world``
pods of one process each:

- ``process``: the worker process of pod 1 SIGKILLed (out of memory, a segfault); its launcher stays: the round
  restarts in the same pods.
- ``pod``: every process of pod 1 SIGKILLed (its node lost); the Job recreates pod 1 after the controller's
  back-off (``--backoff-seconds``, reported apart) while pod 0 waits in place.

The reference is the start-up, launch to first step of the same Job under local-job (what a recovery that
recreated every pod would pay again, back-off aside).

    python -m bench.recovery [--quick] [--repeats N] [--worlds 2 4]
"""

from __future__ import annotations

import argparse
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
from bench.stats import BIN, clean_env, render_rows, verdict

FAULTS = ("process", "pod")
BACKOFF_SECONDS = 1.0
TARGETS = {"process": 0.6, "pod": 0.8}  # recovery (minus the back-off) over start-up


def recovery(data_dir: Path, world: int, fault: str, backoff: float = BACKOFF_SECONDS) -> dict:
    """Seconds from the kill: rank 0 detects it, index 0's launcher opens the next round, (pod) the replacement
    starts after the back-off, rank 0 resumes, the checkpoint is restored, the first step after it."""
    directory = Path(tempfile.mkdtemp(prefix=f"bench-recovery-{fault}-"))
    command = local_job(manifests(world, directory, "config_map.EPOCHS=2", "config_map.BATCH_SIZE=32"),
                        claim(data_dir, directory), directory, backoff)
    killed: dict[str, float] = {}

    def kill_at_batch_3(line: str) -> bool:
        if not killed and "Rank 0: epoch: 2/2, batch: 3/" in line:
            kill_index(1, whole_pod=fault == "pod")
            killed["at"] = time.perf_counter()
            return True
        return False

    seen: dict[str, float] = {}
    events = {
        "killed": kill_at_batch_3,
        "detected": lambda line: bool(killed) and re.search(r"\[mnist-train-0-\w+\] Rank 0: error: (lost contact|a peer)",
                                                            line) is not None,
        "round": lambda line: bool(killed) and re.search(r"\[mnist-train-0-\w+\].*launcher: round 2 of the gang", line)
        is not None,
        "pod_failed": lambda line: bool(killed) and re.search(r"local-job: pod mnist-train-1-\w+ failed", line) is not None,
        "replaced": lambda line: bool(killed) and "local-job: started pod mnist-train-1-" in line,
        "resuming": lambda line: bool(killed) and "Rank 0: resuming from" in line,
        "restored": lambda line: bool(killed) and "Rank 0: restored" in line,
        "first_step": lambda line: bool(killed) and "Rank 0: epoch: 2/2, batch:" in line and "restored" in seen,
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


def kill_index(index: int, whole_pod: bool, root: Path | None = None) -> int:
    """SIGKILL the running pod of completion ``index`` (found by local-job's pod marker; with ``root``, only a pod of
    the local-job whose volume root that is, by the pod's /tmp under it): every process of it, or only its workers
    (not the launcher, ``python -m worker.launch``); how many processes it killed."""
    from localjob.podspec import POD_MARKER

    needle = f"{POD_MARKER}=mnist-train-{index}-".encode()
    inside = f"TMPDIR={root.resolve()}/".encode() if root is not None else b""
    killed = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
                if not any(item.startswith(needle) for item in environ) or \
                        (inside and not any(item.startswith(inside) for item in environ)):
                    continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                launcher = b"worker.launch" in handle.read()
            if whole_pod or not launcher:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed


def measure(data_dir: Path, quick: bool, repeats: int, worlds: tuple[int, ...] = (2, 4)) -> dict:
    """Per world size: the start-up (median) and each fault's recovery (median of the phases), alternating."""
    results: dict = {}
    for world in (2,) if quick else worlds:
        runs: dict[str, list[dict]] = {"startup": [], **{fault: [] for fault in FAULTS}}
        for _ in range(1 if quick else repeats):
            runs["startup"].append(local_job_start(data_dir, world))
            for fault in FAULTS:
                runs[fault].append(recovery(data_dir, world, fault))
        results[f"ws{world}"] = {name: {key: statistics.median(run[key] for run in samples) for key in samples[0]}
                                 for name, samples in runs.items()}
    return results


def rows(results: dict) -> list[tuple[str, str, str, str, str]]:
    table = []
    for key, measured in results.items():
        startup = measured["startup"]["first_step_s"]
        for fault in FAULTS:
            rec = measured[fault]
            ratio = rec["total_without_backoff_s"] / startup
            what = "a killed worker process" if fault == "process" else "a pod lost whole, minus the back-off"
            table.append((f"recovery in place from {what}, local-job, {key.replace('ws', 'ws ')} (s)",
                          f"{rec['total_without_backoff_s']:.2f}", f"{startup:.2f} (launch to first step)",
                          f"{ratio:.2f}", verdict(ratio, TARGETS[fault], True)))
            table.append(("  phases: detection / round opened / back-off / start-up / restore / first step (s)",
                          " / ".join(f"{rec[k]:.2f}" for k in ("detection_s", "round_s", "backoff_s", "startup_s",
                                                                "restore_s", "first_step_s")),
                          f"back-off: the controller's (--backoff-seconds {BACKOFF_SECONDS:g})" if fault == "pod"
                          else "", "", ""))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, help="directory with MNIST/raw/ (default: the worker's digits)")
    parser.add_argument("--quick", action="store_true", help="world size 2, once")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args(argv)
    results = measure(args.data_dir or default_data_dir(), args.quick, args.repeats, tuple(args.worlds))
    print(render_rows(rows(results)))
    print(f"\n({os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
