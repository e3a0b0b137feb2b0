"""What indexed-trainer adds around the training: the start (launch to first step, against a process that only
imports torch and joins a gloo group), the recovery in place (bench/recovery.py), the checkpoint stall
(synchronous against asynchronous saves) and the resident memory per rank (against the import floor)."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import recovery
from bench.local_job_timeline import FIRST_STEP, claim, timeline
from bench.stats import BIN, ROOT, alternate, clean_env, launch_until, peak_rss_per_rank, worlds

_STALL = re.compile(r"sync_blocked_s=(\S+) async_blocked_s=(\S+) sync_write_s=(\S+) async_write_s=(\S+) "
                    r"async_first_blocked_s=(\S+)")
WORKER_SETTINGS = dict(LOG_INTERVAL=1, DOWNLOAD="false", TENSORBOARD="false", OMP_NUM_THREADS=1)


def _torchrun(world: int, module: str) -> list[str]:
    return [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={world}", "-m", module]


# -- start ----------------------------------------------------------------------------------------------
def floor_start(world: int) -> float:
    """Seconds from launch until a process that only imports torch has joined a gloo group of ``world``."""
    seconds, _ = launch_until(_torchrun(world, "bench.floor"), clean_env(OMP_NUM_THREADS=1),
                              lambda line: line.startswith("ready"), timeout=300)
    return seconds


def worker_start(data_dir: Path, world: int) -> float:
    """Seconds from `torchrun --standalone` of the worker to its first training step."""
    env = clean_env(DATA_DIR=data_dir, OUTPUT_DIR=tempfile.mkdtemp(prefix="bench-start-"), EPOCHS=1,
                    **WORKER_SETTINGS)
    seconds, _ = launch_until(_torchrun(world, "worker"), env, lambda line: bool(FIRST_STEP.search(line)), timeout=300)
    return seconds


def run_sh_before_pods(data_dir: Path) -> float:
    """Seconds `./run.sh --local` spends before local-job starts the first pod (its checks, local-job's own)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-run-sh-"))
    env = clean_env(PATH=f"{BIN}:{os.environ['PATH']}", BUILD_DIR=directory / "build", RUNS_DIR=directory / "runs")
    subprocess.run([str(ROOT / "prepare.sh"), "--set", "config_map.EPOCHS=1"], env=env, cwd=ROOT, check=True,
                   capture_output=True)
    claim_dir = claim(data_dir, directory)
    marks = timeline([str(ROOT / "run.sh"), "--local", "--volume", f"mnist-train-data={claim_dir}"], env,
                      {"pod_started": lambda line: "local-job: started pod" in line}, until="pod_started", timeout=300)
    return marks["pod_started"]


# -- checkpoint stall -----------------------------------------------------------------------------------
def checkpoint_stall(strategy: str, model: str, repeats: int) -> dict:
    # the run's checkpoints in a directory of ours, removed here: launch_until kills the run at its figures' line,
    # before its rank 0 removes what it wrote (each CI run left two such directories in /var/tmp)
    directory = Path(tempfile.mkdtemp(prefix="bench-checkpoints-", dir=_disk_directory()))
    command = _torchrun(2, "bench.checkpoint_stall") + ["--strategy", strategy, "--model", model, "--repeats",
                                                        str(repeats), "--directory", str(directory)]
    try:
        _, lines = launch_until(command, clean_env(OMP_NUM_THREADS=1), lambda line: bool(_STALL.search(line)),
                                timeout=1800)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    match = next((m for m in map(_STALL.search, lines) if m), None)
    if match is None:
        raise RuntimeError(f"bench.checkpoint_stall {strategy} {model} failed:\n{''.join(lines[-20:])}")
    keys = ("sync_blocked_s", "async_blocked_s", "sync_write_s", "async_write_s", "async_first_blocked_s")
    return dict(zip(keys, map(float, match.groups()), strict=True))


def _disk_directory() -> Path:
    """Where checkpoints go in the benchmark: a disk, not a tmpfs (/dev/shm, a RAM-backed /tmp)."""
    for candidate in (Path("/var/tmp"), Path(tempfile.gettempdir()), ROOT):
        if candidate.is_dir() and os.access(candidate, os.W_OK):
            return candidate
    return ROOT


# -- memory ---------------------------------------------------------------------------------------------
MEMORY_OPTIONS = {
    "off": dict(TENSORBOARD="false", CHECKPOINT_EVERY=0, CHECKPOINT_EVERY_SECONDS=0, CHECKPOINT_ASYNC="false"),
    "on": dict(TENSORBOARD="true", CHECKPOINT_EVERY=1, CHECKPOINT_ASYNC="true"),
}


def memory(data_dir: Path, world: int, quick: bool) -> dict:
    """Peak resident MiB per rank: the import floor, the worker with every option off and on; and the MiB the
    training data and the model's state (weights, gradients, two Adam moments) take in a rank."""
    from worker.mnist.model import MnistCNN, parameter_count

    floor = peak_rss_per_rank([sys.executable, "-m", "bench.floor"], clean_env(OMP_NUM_THREADS=1), world)
    runs = {}
    for name, options in MEMORY_OPTIONS.items():
        env = clean_env(DATA_DIR=data_dir, OUTPUT_DIR=tempfile.mkdtemp(prefix="bench-memory-"), EPOCHS=1,
                        LOG_INTERVAL=100000, DOWNLOAD="false", OMP_NUM_THREADS=1, **options,
                        **({"TRAIN_SAMPLES": 256} if quick else {}))
        runs[name] = peak_rss_per_rank([sys.executable, "-m", "worker"], env, world)
    train, test = (_image_count(data_dir / "MNIST" / "raw" / f"{split}-images-idx3-ubyte") for split in ("train", "t10k"))
    images = (min(train, 256) if quick else train) + test
    data_mib = images * (28 * 28 * 4 + 8) / 2**20  # float32 pixels, int64 labels, in memory after loading
    model_mib = parameter_count(MnistCNN()) * 4 * 4 / 2**20
    return {"floor_mib": floor, "off_mib": runs["off"], "on_mib": runs["on"], "data_mib": data_mib,
            "model_mib": model_mib}


def _image_count(path: Path) -> int:
    """The number of images in an IDX file, from its header."""
    with path.open("rb") as handle:
        return int.from_bytes(handle.read(8)[4:8], "big")


def measure(data_dir: Path, quick: bool, repeats: int, log) -> dict:
    results: dict = {}
    log("start: launch to the first step against the import floor...")
    for world in worlds(quick):
        results[f"start_ws{world}"] = alternate({
            "floor_s": lambda world=world: floor_start(world),
            "torchrun_s": lambda world=world: worker_start(data_dir, world),
        }, repeats)
    results["run_sh_before_pods_s"] = statistics.median(run_sh_before_pods(data_dir) for _ in range(repeats))
    log("recovery in place under local-job: a killed worker process, a pod lost whole...")
    results["recovery"] = recovery.measure(data_dir, quick, repeats)
    # local-job's launch to the first step of 2 pods is the recovery's baseline, measured there (repeats times, the
    # median): the same runs, not a second set
    results["start_local_job"] = results["recovery"]["ws2"]["startup"]
    log("checkpoint stall, synchronous against asynchronous...")
    models = ("cnn",) if quick else ("cnn", "mlp")  # the MLP's 1 GiB of state is no check of the code path
    results["checkpoint_stall"] = {f"{strategy}/{model}": checkpoint_stall(strategy, model, 1 if quick else repeats)
                                   for strategy in ("allreduce", "fsdp") for model in models}
    log("memory per rank against the import floor...")
    results["memory_floor"] = memory(data_dir, 2, quick)
    return results

