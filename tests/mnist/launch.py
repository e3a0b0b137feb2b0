"""Starting real worker processes for tests: alone, under torchrun, or as hand-made ranks on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from localjob.ports import free_port  # noqa: F401 (the tests' ports come from here)
from tests.conftest import BIN, OUTSIDE

# Its sitecustomize.py installs the fault injector as the worker's hook in processes that have FAULT_INJECT.
FAULT_INJECTION = Path(__file__).resolve().parent.parent / "fault_injection"


# A crash before the first checkpoint, a fault after it, a crash before the next one (3 epochs): 2 rounds failed
# without progress over the job's life, never 2 in a row (local-job and Slurm run it with max_restarts 1).
CRASH_FAULT_CRASH = "exit=3@batch=1.2,rank=1,attempt=0; sigkill@batch=2.3,rank=0,attempt=1; exit=3@batch=2.5,rank=1,attempt=2"


def fault_env(spec: str) -> dict[str, str]:
    """The environment that injects the faults of ``spec`` (tests/fault_injection/fault_injector.py)."""
    return {"FAULT_INJECT": spec, "PYTHONPATH": str(FAULT_INJECTION)}


def worker_env(data_dir: Path, output_dir: Path, **settings) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_", "WORLD_", "GROUP_",
                                                                      "MASTER_", "TORCHELASTIC", "JOB_COMPLETION"))}
    env.update({"DATA_DIR": str(data_dir), "OUTPUT_DIR": str(output_dir), "PYTHONUNBUFFERED": "1",
                "DOWNLOAD": "false"})
    env.update({key: str(value) for key, value in settings.items()})
    if "FAULT_INJECT" in settings:
        env.update(fault_env(str(settings["FAULT_INJECT"])))
    return env


def workload_env(settings: dict, model: Path, data: Path, output: Path, extra: dict | None = None) -> dict:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("RANK", "LOCAL_", "WORLD_", "MASTER_", "TORCHELASTIC"))}
    env.update(settings, MODEL_DIR=str(model), DATASET_DIR=str(data), OUTPUT_DIR=str(output), PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def run_workload(module: str, settings: dict, model: Path, data: Path, output: Path, extra: dict | None = None,
                 timeout: float = 300, processes: int = 2) -> subprocess.CompletedProcess:
    """Built-in workload ``module`` under the pod's launcher, ``processes`` processes (gloo, CPU): ``settings``,
    then the model, data and output directories, then ``extra``."""
    return run([sys.executable, "-m", "worker.launch", "--standalone", f"--nproc-per-node={processes}", "-m", module],
               workload_env(settings, model, data, output, extra), timeout)


def as_node(node: int, nodes: int, port: int, module: str = "worker", per_node: int = 1,
            join_timeout: int = 600) -> list[str]:
    """The Job's main container command for pod ``node`` of ``nodes``, running ``module`` (master on 127.0.0.1)."""
    return [sys.executable, "-m", "worker.launch", f"--nnodes={nodes}", f"--nproc-per-node={per_node}",
            f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}", "--max-restarts=0",
            f"--rdzv-conf=timeout={join_timeout}", "-m", module]


def snapshot(directory: Path) -> dict:
    """Every file under ``directory`` with its bytes and modification time: a rewrite shows."""
    return {str(path.relative_to(directory)): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(directory.rglob("*")) if path.is_file()}


def run_workload_on_nodes(module: str, settings: dict, model: Path, data: Path, output: Path,
                          extra: dict | None = None, nodes: int = 2, per_node: int = 2,
                          timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """The same on ``nodes`` launchers of ``per_node`` processes each, as the Job's pods start them (one rendezvous
    on 127.0.0.1): each launcher's result, node 0 first."""
    env, port = workload_env(settings, model, data, output, extra), free_port()
    launchers = [subprocess.Popen(as_node(node, nodes, port, module, per_node),
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=OUTSIDE)
                 for node in range(nodes)]
    results = []
    for launcher in launchers:
        try:
            stdout, stderr = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in launchers:
                other.kill()
            raise
        results.append(subprocess.CompletedProcess(launcher.args, launcher.returncode, stdout, stderr))
    return results


def torchrun_command(nproc: int) -> list[str]:
    return [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={nproc}", "-m", "worker"]


def run(command: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=OUTSIDE)


def start(command: list[str], env: dict) -> subprocess.Popen:
    """Start in a new session, so the whole tree (torchrun and its workers) can be signalled together."""
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=OUTSIDE, start_new_session=True)


def rank_command() -> list[str]:
    return [sys.executable, "-m", "worker"]


def rank_env(base: dict, rank: int, world: int, port: int, local_world: int | None = None) -> dict:
    """The variables torchrun would set, for one hand-made rank (one rank per 'pod')."""
    return {**base, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": str(local_world or 1), "GROUP_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}


def read_until(process: subprocess.Popen, needle: str, timeout: float, seen: list[str]) -> bool:
    """Read lines until one contains ``needle``; keep everything read in ``seen``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            if process.poll() is not None:
                return False
            continue
        seen.append(line)
        if needle in line:
            return True
    return False


def kill_tree(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def recorded_epochs(output_dir: Path) -> list[int]:
    """The epochs rank 0 recorded in OUTPUT_DIR/metrics.jsonl, in order (a lost or repeated one shows)."""
    return [json.loads(line)["epoch"] for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def resumed_with_a_changed_model(run, model: Path, data: Path, tmp_path: Path, file: str, key: str, value
                                 ) -> tuple[str, str]:
    """``run(model, data, output, settings)`` for one epoch, then again into the same output with a copy of
    ``model`` whose ``file`` (JSON) has ``key`` set to ``value`` and BATCH_SIZE 8, twice: on the finished run (its
    launcher refuses, before any rendezvous), then as if killed after its last checkpoint (no summary.json: the
    program refuses the checkpoint). What each refusal (78) said: the launcher's stderr, the program's stdout."""
    import shutil

    assert run(model, data, tmp_path / "out", {"EPOCHS": "1"}).returncode == 0
    changed = tmp_path / "model"
    shutil.copytree(model, changed)
    config = json.loads((changed / file).read_text())
    config[key] = value
    (changed / file).write_text(json.dumps(config))
    finished = run(changed, data, tmp_path / "out", {"EPOCHS": "1", "BATCH_SIZE": "8"})
    assert finished.returncode == 78, finished.stderr[-3000:]
    (tmp_path / "out" / "summary.json").unlink()
    resumed = run(changed, data, tmp_path / "out", {"EPOCHS": "1", "BATCH_SIZE": "8"})
    assert resumed.returncode == 78, resumed.stdout[-3000:]
    return finished.stderr, resumed.stdout
