"""The live metrics every built-in program serves while it trains, in Prometheus' text format: their names and
meaning (one table, for the runtime that serves them and the status views that read them), where they are
served, and how a scrape reads as one line. Torch-free, and free of prometheus_client: the status views parse
the few lines they show themselves.

Each pod's (Slurm: each node's) local rank 0 serves http://<pod>:<port>/metrics while its program trains, the
port in PORT_VARIABLE (values metrics.port; unset: nothing served). Pod index 0's are the job's: rank 0's loss
and evaluation; the progress is every rank's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from trainer_contract.progress import format_duration

# What the program reads: the port to serve on (absent or empty: no endpoint).
PORT_VARIABLE = "INDEXED_TRAINER_METRICS_PORT"
# Where the endpoint binds: unset, every interface of the pod's own network namespace (Prometheus reaches it there);
# local-job sets 127.0.0.1, since its pods share the developer's machine and its network.
ADDRESS_VARIABLE = "INDEXED_TRAINER_METRICS_ADDRESS"
# The container port's name (Kubernetes), which a PodMonitor's podMetricsEndpoints names.
PORT_NAME = "metrics"
PATH = "/metrics"
PREFIX = "indexed_trainer_"

# name (without PREFIX) -> (help, label names). Gauges all: a resumed run goes back to its checkpoint's step.
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "step": ("Optimizer steps done (the run's, a resumed one included)", ()),
    "steps_planned": ("Optimizer steps the run trains in all", ()),
    "epoch": ("The epoch being trained, from 1", ()),
    "epochs_planned": ("Epochs the run trains in all", ()),
    "eta_seconds": ("Time left at this start's pace, in seconds", ()),
    "loss": ("The latest reported training loss (this rank's)", ()),
    "evaluation": ("The latest evaluation score, by metric", ("metric",)),
    "throughput_per_second": ("Samples or tokens this process trains per second, since the last report",
                              ("unit",)),
    "last_checkpoint_step": ("The step of the newest checkpoint written", ()),
    "last_checkpoint_timestamp_seconds": ("When the newest checkpoint was written, Unix time", ()),
    "restarts": ("Starts of this run before this one (resumes and restarts)", ()),
    "failed_rounds": ("The Job's rounds that failed and were restarted in place, by whether they counted against "
                      "max_restarts (false: a fault after progress, a round that had published a newer checkpoint)",
                      ("counted",)),
    "failed_rounds_in_a_row": ("The Job's rounds that failed without progress one after another, since the newest "
                               "round that published a checkpoint: what max_restarts bounds", ()),
    "max_restarts": ("The rounds failed without progress in a row the Job may restart (values max_restarts)", ()),
    "goodput_ratio": ("The share of the wall time since the Job's first step not lost to faults", ()),
    "faults": ("The Job's faults recovered from in place, by kind", ("kind",)),
    "fault_seconds": ("Seconds the Job's faults cost, by phase (detect, restart, restore, recompute)", ("phase",)),
    "peak_memory_bytes": ("This process's peak memory, by device (cpu: resident set; cuda: allocated)",
                          ("device",)),
    "replica_groups_participating": ("Replica groups in the latest step's quorum (fault_tolerance.replica_groups)",
                                     ()),
    "replica_group_steps": ("Steps this replica group took since it started, by whether they committed (false: a "
                            "group failed in the step, which the next quorum takes again)", ("committed",)),
}

Samples = Mapping[str, float]  # "name{labels}" (name without PREFIX) -> value


def parse(text: str) -> dict[str, float]:
    """The samples of a scrape that are ours, as ``{"step": 12.0, 'evaluation{metric="accuracy"}': 0.97}``;
    lines it does not understand are skipped (a status view shows what it can, never fails on a scrape)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(PREFIX):
            continue
        name, _, rest = line[len(PREFIX):].rpartition(" ")
        try:
            samples[name.strip()] = float(rest)
        except ValueError:
            continue
    return samples


def summary(samples: Samples, now: float | None = None) -> str | None:
    """A scrape as one line: ``step 120/500 (epoch 2/5), loss 0.3124, accuracy 0.9712, 1850 samples/s, about
    3 min 05 s left, last checkpoint step 100 (12 s ago), 1 restart, 2 replica groups stepping, this group's steps:
    118 of 120 committed, peak memory 1.2 GiB (cpu)``; None when it holds none of ours."""
    samples = {name: value for name, value in samples.items() if math.isfinite(value)}  # NaN: not known
    if not samples:
        return None
    now = time.time() if now is None else now
    parts = []
    if "step" in samples:
        planned = samples.get("steps_planned")
        part = f"step {samples['step']:.0f}" + (f"/{planned:.0f}" if planned else "")
        if "epoch" in samples:
            epochs = samples.get("epochs_planned")
            part += f" (epoch {samples['epoch']:.0f}" + (f"/{epochs:.0f})" if epochs else ")")
        parts.append(part)
    if "loss" in samples:
        parts.append(f"loss {samples['loss']:.4f}")
    parts += [f"{_label(name, 'metric')} {value:.4g}" for name, value in sorted(samples.items())
              if name.startswith("evaluation{")]
    parts += [f"{value:.0f} {_label(name, 'unit')}/s" for name, value in sorted(samples.items())
              if name.startswith("throughput_per_second{")]
    if "eta_seconds" in samples:
        parts.append("done" if samples["eta_seconds"] <= 0 else f"about {format_duration(samples['eta_seconds'])} left")
    if "last_checkpoint_step" in samples:
        written = samples.get("last_checkpoint_timestamp_seconds")
        ago = f" ({format_duration(now - written)} ago)" if written else ""
        parts.append(f"last checkpoint step {samples['last_checkpoint_step']:.0f}{ago}")
    if "restarts" in samples:
        restarts = int(samples["restarts"])
        parts.append(f"{restarts} restart{'s' if restarts != 1 else ''}")
    parts += _rounds_and_groups(samples)
    faults = sum(value for name, value in samples.items() if name.startswith("faults{"))
    lost = sum(value for name, value in samples.items() if name.startswith("fault_seconds{"))
    if "goodput_ratio" in samples:
        parts.append(f"goodput {samples['goodput_ratio']:.0%}"
                     + (f" ({faults:.0f} fault{'s' if faults != 1 else ''}, {lost:.1f} s lost)" if faults else ""))
    parts += [f"peak memory {value / 2**30:.1f} GiB ({_label(name, 'device')})" for name, value in sorted(samples.items())
              if name.startswith("peak_memory_bytes{")]
    return ", ".join(parts) or None


def _rounds_and_groups(samples: Samples) -> list[str]:
    """The restart budget's part of the line (rounds restarted in place) and the replica groups' quorum."""
    parts = []
    counted = samples.get('failed_rounds{counted="true"}')
    after_progress = samples.get('failed_rounds{counted="false"}')
    if counted is not None or after_progress is not None:
        limit, in_a_row = samples.get("max_restarts"), samples.get("failed_rounds_in_a_row")
        budget = (f"{in_a_row:.0f} in a row" if in_a_row is not None else "") + (
            f" of {limit:.0f} allowed" if limit is not None else "")
        parts.append(f"failed rounds: {counted or 0:.0f} counted" + (f" ({budget.strip()})" if budget else "")
                     + f", {after_progress or 0:.0f} after progress not counted")
    if "replica_groups_participating" in samples:
        committed = samples.get('replica_group_steps{committed="true"}', 0.0)
        taken = committed + samples.get('replica_group_steps{committed="false"}', 0.0)
        stepping = int(samples["replica_groups_participating"])
        parts.append(f"{stepping} replica group{'s' if stepping != 1 else ''} stepping, this group's steps: "
                     f"{committed:.0f} of {taken:.0f} committed")
    return parts


def _label(sample: str, label: str) -> str:
    """The value of ``label`` in a sample's name: ``evaluation{metric="f1"}`` -> ``f1``."""
    _, _, rest = sample.partition(f'{label}="')
    return rest.partition('"')[0] or "?"
