"""Runs of a rendered Job under local-job, followed line by line: seconds from the launch to each event (the
start-up and recovery rows of bench/distributed_cost.py and bench/recovery.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.stats import BIN, ROOT, clean_env

FIRST_STEP = re.compile(r"Rank 0: epoch: \d+/\d+, batch: 1/")


def manifests(replicas: int, directory: Path, *sets: str) -> Path:
    args = [str(BIN / "gen-manifests"), "--set", f"replicas={replicas}", "--set", "config_map.DOWNLOAD=false",
            "--set", "config_map.TENSORBOARD=false", "--set", "config_map.LOG_INTERVAL=1"]
    for item in sets:
        args += ["--set", item]
    path = directory / "job.yaml"
    path.write_bytes(subprocess.run(args, capture_output=True, check=True).stdout)
    return path


def claim(data_dir: Path, directory: Path) -> Path:
    """A claim directory whose data/ is the benchmark's MNIST (DATA_DIR's default place on the volume)."""
    claim = directory / "claim"
    claim.mkdir()
    (claim / "data").symlink_to(data_dir.resolve())
    return claim


def local_job(manifests: Path, claim: Path, directory: Path, backoff: float = 10.0) -> list[str]:
    """local-job's command line; run as root, --allow-root (the benchmark's claim and Python may be root's
    alone: the pods then run as root, as ./run.sh --local runs them; what is measured is the runner)."""
    return [str(BIN / "local-job"), str(manifests), "--volume-root", str(directory / "root"), "--volume",
            f"mnist-train-data={claim}", "--backoff-seconds", str(backoff),
            *(["--allow-root"] if os.geteuid() == 0 else [])]


def local_job_start(data_dir: Path, replicas: int) -> dict:
    """Under local-job: seconds from its launch to the first pod's start and to the first training step."""
    directory = Path(tempfile.mkdtemp(prefix="bench-local-start-"))
    command = local_job(manifests(replicas, directory, "config_map.EPOCHS=1"), claim(data_dir, directory),
                         directory)
    marks = timeline(command, clean_env(PATH=f"{BIN}:{os.environ['PATH']}"), {
        "pod_started": lambda line: "local-job: started pod" in line,
        "first_step": lambda line: bool(FIRST_STEP.search(line))}, until="first_step", timeout=300)
    return {"pod_started_s": marks["pod_started"], "first_step_s": marks["first_step"]}


def timeline(command: list[str], env: dict, events: dict[str, Callable[[str], bool]], until: str, timeout: float,
              seen: dict[str, float] | None = None, last: set[str] = frozenset()) -> dict[str, float]:
    """Seconds from launch to the first line of each event (the last line for those in ``last``), until ``until``."""
    seen = {} if seen is None else seen
    for elapsed, line in follow(command, env, timeout):
        for name, matches in events.items():
            if (name not in seen or name in last) and matches(line):
                seen[name] = elapsed
        if until in seen:
            return dict(seen)
    raise RuntimeError(f"{until} never came; saw {sorted(seen)}")


def follow(command: list[str], env: dict, timeout: float) -> Iterator[tuple[float, str]]:
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
