"""What indexed-trainer adds around the training: the start (launch to first step, against a process that only
imports torch and joins a gloo group), the recovery from a killed pod (phase by phase), the checkpoint stall
(synchronous against asynchronous saves) and the resident memory per rank (against the import floor)."""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.stats import BIN, ROOT, alternate, clean_env, launch_until, peak_rss_per_rank

FIRST_STEP = re.compile(r"Rank 0: epoch: \d+/\d+, batch: 1/")
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


def _manifests(replicas: int, directory: Path, *sets: str) -> Path:
    args = [str(BIN / "gen-manifests"), "--set", f"replicas={replicas}", "--set", "config_map.DOWNLOAD=false",
            "--set", "config_map.TENSORBOARD=false", "--set", "config_map.LOG_INTERVAL=1"]
    for item in sets:
        args += ["--set", item]
    path = directory / "job.yaml"
    path.write_bytes(subprocess.run(args, capture_output=True, check=True).stdout)
    return path


def _claim(data_dir: Path, directory: Path) -> Path:
    """A claim directory whose data/ is the benchmark's MNIST (DATA_DIR's default place on the volume)."""
    claim = directory / "claim"
    claim.mkdir()
    (claim / "data").symlink_to(data_dir.resolve())
    return claim


def _local_job(manifests: Path, claim: Path, directory: Path, backoff: float = 10.0) -> list[str]:
    return [str(BIN / "local-job"), str(manifests), "--volume-root", str(directory / "root"), "--volume",
            f"mnist-train-data={claim}", "--backoff-seconds", str(backoff)]


def local_job_start(data_dir: Path, replicas: int) -> dict:
    """Under local-job: seconds from its launch to the first pod's start and to the first training step."""
    directory = Path(tempfile.mkdtemp(prefix="bench-local-start-"))
    command = _local_job(_manifests(replicas, directory, "config_map.EPOCHS=1"), _claim(data_dir, directory),
                         directory)
    marks = _timeline(command, clean_env(PATH=f"{BIN}:{os.environ['PATH']}"), {
        "pod_started": lambda line: "local-job: started pod" in line,
        "first_step": lambda line: bool(FIRST_STEP.search(line))}, until="first_step", timeout=300)
    return {"pod_started_s": marks["pod_started"], "first_step_s": marks["first_step"]}


def run_sh_before_pods(data_dir: Path) -> float:
    """Seconds `./run.sh --local` spends before local-job starts the first pod (its checks, local-job's own)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-run-sh-"))
    env = clean_env(PATH=f"{BIN}:{os.environ['PATH']}", BUILD_DIR=directory / "build", RUNS_DIR=directory / "runs")
    subprocess.run([str(ROOT / "prepare.sh"), "--set", "config_map.EPOCHS=1"], env=env, cwd=ROOT, check=True,
                   capture_output=True)
    claim = _claim(data_dir, directory)
    marks = _timeline([str(ROOT / "run.sh"), "--local", "--volume", f"mnist-train-data={claim}"], env,
                      {"pod_started": lambda line: "local-job: started pod" in line}, until="pod_started", timeout=300)
    return marks["pod_started"]


# -- recovery -------------------------------------------------------------------------------------------
def recovery(data_dir: Path, backoff: float) -> dict:
    """2 pods under local-job; pod 1's processes SIGKILLed at batch 3 of epoch 2 (epoch 1's checkpoint on the
    volume). Seconds from the kill: rank 0 detects it, the survivor's pod has ended, the controller's back-off
    (``backoff``: reported apart), the new gang's start until rank 0 resumes, the checkpoint's restore, the
    first step after it."""
    directory = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    command = _local_job(_manifests(2, directory, "config_map.EPOCHS=2", "config_map.BATCH_SIZE=32"),
                         _claim(data_dir, directory), directory, backoff)
    killed: dict[str, float] = {}

    def kill_at_batch_3(line: str) -> bool:
        if not killed and "Rank 0: epoch: 2/2, batch: 3/" in line:
            _kill_index(1)
            killed["at"] = time.perf_counter()
            return True
        return False

    events = {
        "killed": kill_at_batch_3,
        "detected": lambda line: bool(killed) and re.search(r"\[mnist-train-0-\w+\] Rank 0: error: (lost contact|a peer)",
                                                            line) is not None,
        "survivor_ended": lambda line: bool(killed) and re.search(r"local-job: pod mnist-train-0-\w+ failed", line)
        is not None,
        "gang_started": lambda line: bool(killed) and "local-job: started pod mnist-train-" in line,
        "resuming": lambda line: bool(killed) and "Rank 0: resuming from" in line,
        "restored": lambda line: bool(killed) and "Rank 0: restored" in line,
        "first_step": lambda line: bool(killed) and "Rank 0: epoch: 2/2, batch:" in line and "restored" in seen,
    }
    seen: dict[str, float] = {}
    marks = _timeline(command, clean_env(PATH=f"{BIN}:{os.environ['PATH']}"), events, until="first_step",
                      timeout=600, seen=seen, last={"gang_started"})
    start = marks["killed"]
    at = {name: marks[name] - start for name in marks if name != "killed"}
    return {"detection_s": at["detected"], "survivors_exit_s": at["survivor_ended"] - at["detected"],
            "backoff_s": at["gang_started"] - at["survivor_ended"], "startup_s": at["resuming"] - at["gang_started"],
            "restore_s": at["restored"] - at["resuming"], "first_step_s": at["first_step"] - at["restored"],
            "total_s": at["first_step"], "total_without_backoff_s": at["first_step"] - (at["gang_started"]
                                                                                     - at["survivor_ended"])}


def _kill_index(index: int) -> None:
    """SIGKILL every process of the running pod of completion ``index`` (found by local-job's pod marker)."""
    from localjob.podspec import POD_MARKER

    needle = f"{POD_MARKER}=mnist-train-{index}-".encode()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as handle:
                    if any(item.startswith(needle) for item in handle.read().split(b"\0")):
                        os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue


def _timeline(command: list[str], env: dict, events: dict[str, Callable[[str], bool]], until: str, timeout: float,
              seen: dict[str, float] | None = None, last: set[str] = frozenset()) -> dict[str, float]:
    """Seconds from launch to the first line of each event (the last line for those in ``last``), until ``until``."""
    seen = {} if seen is None else seen
    for elapsed, line in _follow(command, env, timeout):
        for name, matches in events.items():
            if (name not in seen or name in last) and matches(line):
                seen[name] = elapsed
        if until in seen:
            return dict(seen)
    raise RuntimeError(f"{until} never came; saw {sorted(seen)}")


def _follow(command: list[str], env: dict, timeout: float) -> Iterator[tuple[float, str]]:
    from localjob.podspec import POD_MARKER
    from localjob.processes import kill_pod

    marker = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    started = time.perf_counter()
    process = subprocess.Popen(command, env={**env, POD_MARKER: marker}, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            yield time.perf_counter() - started, line
            if time.perf_counter() - started > timeout:
                return
    finally:
        process.send_signal(signal.SIGINT)  # local-job ends its pods with their grace period
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        kill_pod(marker)
        process.wait()


# -- checkpoint stall -----------------------------------------------------------------------------------
def checkpoint_stall(strategy: str, model: str, repeats: int) -> dict:
    command = _torchrun(2, "bench.checkpoint_stall") + ["--strategy", strategy, "--model", model, "--repeats",
                                                        str(repeats), "--directory", str(_disk_directory())]
    _, lines = launch_until(command, clean_env(OMP_NUM_THREADS=1), lambda line: bool(_STALL.search(line)), timeout=1800)
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
    "off": dict(TENSORBOARD="false", CHECKPOINT_EVERY=0, CHECKPOINT_ASYNC="false"),
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
    for world in (1, 2):
        results[f"start_ws{world}"] = alternate({
            "floor_s": lambda world=world: floor_start(world),
            "torchrun_s": lambda world=world: worker_start(data_dir, world),
        }, repeats)
    local = [local_job_start(data_dir, 2) for _ in range(repeats)]
    results["start_local_job"] = {key: statistics.median(run[key] for run in local) for key in local[0]}
    results["run_sh_before_pods_s"] = statistics.median(run_sh_before_pods(data_dir) for _ in range(repeats))
    log("recovery from a SIGKILLed pod under local-job...")
    recoveries = [recovery(data_dir, backoff=1.0) for _ in range(1 if quick else min(repeats, 2))]
    results["recovery"] = {key: statistics.median(run[key] for run in recoveries) for key in recoveries[0]}
    log("checkpoint stall, synchronous against asynchronous...")
    models = ("cnn",) if quick else ("cnn", "mlp")  # the MLP's 1 GiB of state is no check of the code path
    results["checkpoint_stall"] = {f"{strategy}/{model}": checkpoint_stall(strategy, model, 1 if quick else repeats)
                                   for strategy in ("allreduce", "fsdp") for model in models}
    log("memory per rank against the import floor...")
    results["memory_floor"] = memory(data_dir, 2, quick)
    return results

