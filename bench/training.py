"""Time to accuracy, throughput and memory: the worker and the standard DDP loop, launched as users would."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from bench.stats import BIN, clean_env, launch_until, peak_rss_per_rank

_WORKER_ACCURACY = re.compile(r"test accuracy=(\d\.\d+), (\d+) images/s")
_STANDARD_ACCURACY = re.compile(r"test accuracy=(\d\.\d+) images/s=(\d+\.\d+)")


def _launcher(world: int, module: str) -> list[str]:
    return [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={world}", "-m", module]


def worker_time_to_accuracy(data_dir: Path, world: int, target: float, quick: bool) -> float:
    out = Path(tempfile.mkdtemp(prefix="bench-worker-"))
    env = clean_env(DATA_DIR=data_dir, OUTPUT_DIR=out, LOG_INTERVAL=100000, DOWNLOAD="false", OMP_NUM_THREADS=2)
    if quick:
        env.update(EPOCHS="1", TRAIN_SAMPLES="256")

    def reached(line: str) -> bool:
        match = _WORKER_ACCURACY.search(line)
        return bool(match) and (quick or float(match.group(1)) >= target)

    command = [sys.executable, "-m", "worker"] if world == 1 else _launcher(world, "worker")
    seconds, _ = launch_until(command, env, reached, timeout=1800)
    return seconds


def strategy_run(data_dir: Path, world: int, target: float, quick: bool, strategy: str, precision: str) -> dict:
    """One worker run with STRATEGY and PRECISION: seconds from launch to ``target`` test accuracy, and the
    images/s of all processes together in the last epoch reported by then (the second, where there is one)."""
    out = Path(tempfile.mkdtemp(prefix="bench-strategy-"))
    env = clean_env(DATA_DIR=data_dir, OUTPUT_DIR=out, LOG_INTERVAL=100000, DOWNLOAD="false", OMP_NUM_THREADS=2,
                    STRATEGY=strategy, PRECISION=precision, CHECKPOINT_EVERY=0, CHECKPOINT_EVERY_SECONDS=0,
                    TENSORBOARD="false")
    if quick:
        env.update(EPOCHS="1", TRAIN_SAMPLES="256")
    rates: list[float] = []

    def reached(line: str) -> bool:
        match = _WORKER_ACCURACY.search(line)
        if not match:
            return False
        rates.append(float(match.group(2)))
        return (quick or float(match.group(1)) >= target) and (quick or len(rates) >= 2)

    command = [sys.executable, "-m", "worker"] if world == 1 else _launcher(world, "worker")
    seconds, _ = launch_until(command, env, reached, timeout=3600)
    return {"seconds": seconds, "images_per_second": rates[min(1, len(rates) - 1)] if rates else float("nan")}


def standard_time_to_accuracy(data_dir: Path, world: int, target: float, quick: bool, recipe: str = "examples") -> float:
    """The standard DDP loop: pytorch/examples' network and recipe (14 epochs), or ``recipe="worker"``: the
    worker's model, optimizer and schedule (5 epochs) in the same standard loop."""
    env = clean_env(OMP_NUM_THREADS=max(1, 2 // world))
    extra = ["--epochs", "1", "--max-steps", "4"] if quick else ["--epochs", "14" if recipe == "examples" else "5"]
    extra += ["--recipe", recipe]

    def reached(line: str) -> bool:
        match = _STANDARD_ACCURACY.search(line)
        return bool(match) and (quick or float(match.group(1)) >= target)

    seconds, _ = launch_until(_launcher(world, "bench.standard_ddp") + ["--data-dir", str(data_dir), *extra],
                              env, reached, timeout=3600)
    return seconds


def worker_throughput(data_dir: Path, world: int, quick: bool) -> float:
    """Training images/s per process in the worker's second epoch (steady state)."""
    out = Path(tempfile.mkdtemp(prefix="bench-worker-"))
    env = clean_env(DATA_DIR=data_dir, OUTPUT_DIR=out, LOG_INTERVAL=100000, DOWNLOAD="false", OMP_NUM_THREADS=2,
                    EPOCHS=2, CHECKPOINT_EVERY=0, CHECKPOINT_EVERY_SECONDS=0)
    if quick:
        env["TRAIN_SAMPLES"] = "256"
    return _second_epoch_rate(_launcher(world, "worker"), env, _WORKER_ACCURACY) / world


def ddp_throughput(data_dir: Path, world: int, quick: bool) -> float:
    """The same CNN under DDP with the standard DataLoader pipeline: images/s per process, second epoch."""
    env = clean_env(OMP_NUM_THREADS=max(1, 2 // world))
    extra = ["--epochs", "2", "--model", "worker"] + (["--max-steps", "4"] if quick else [])
    command = _launcher(world, "bench.standard_ddp") + ["--data-dir", str(data_dir), *extra]
    return _second_epoch_rate(command, env, _STANDARD_ACCURACY)


def _second_epoch_rate(command: list[str], env: dict, pattern: re.Pattern) -> float:
    """The images/s the run reports for its second epoch (the first one warms up); group 2 of ``pattern``."""
    rates = []

    def second_epoch(line: str) -> bool:
        match = pattern.search(line)
        if match:
            rates.append(float(match.group(2)))
        return len(rates) == 2

    launch_until(command, env, second_epoch, timeout=1800)
    return rates[-1] if len(rates) == 2 else float("nan")


def peak_memory_per_rank(data_dir: Path, world: int, quick: bool) -> float:
    """Largest peak resident memory (MiB) of one rank of the worker, each rank started by hand."""
    env = clean_env(DATA_DIR=data_dir, OUTPUT_DIR=tempfile.mkdtemp(prefix="bench-memory-"), LOG_INTERVAL=100000,
                    DOWNLOAD="false", EPOCHS=1, OMP_NUM_THREADS=1, CHECKPOINT_EVERY=0, CHECKPOINT_EVERY_SECONDS=0,
                    **({"TRAIN_SAMPLES": 256} if quick else {}))
    return peak_rss_per_rank([sys.executable, "-m", "worker"], env, world)


_MEMORY = re.compile(r"peak_growth_mib=(\d+\.\d+) resident_growth_mib=(-?\d+\.\d+) state_mib=(\d+\.\d+)")


def strategy_memory(world: int, strategy: str, quick: bool) -> dict:
    """Peak and final resident memory growth of the largest rank (bench.strategy_memory), MiB, and the model
    state's size."""
    command = _launcher(world, "bench.strategy_memory") + ["--strategy", strategy, "--steps", "1" if quick else "3"]
    seconds, lines = launch_until(command, clean_env(OMP_NUM_THREADS=1), lambda line: bool(_MEMORY.search(line)),
                                  timeout=900)
    match = next((m for m in map(_MEMORY.search, lines) if m), None)
    if match is None:
        raise RuntimeError(f"bench.strategy_memory {strategy} at world size {world} failed:\n{''.join(lines[-20:])}")
    return {"peak_growth_mib": float(match.group(1)), "resident_growth_mib": float(match.group(2)),
            "state_mib": float(match.group(3))}
