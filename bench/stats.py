"""Small helpers: medians of alternating repetitions, and process launching with a clock."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from localjob.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def alternate(measures: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Run each measurement once per round, in turn (a, b, a, b, ...), and return each one's median.

    Alternating spreads the machine's noise (other load, frequency changes) over all contenders alike.
    """
    return {name: statistics.median(values) for name, values in alternate_samples(measures, repeats).items()}


def alternate_samples(measures: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Each measurement's samples, one a round, in turn: the i-th of each come from the same round (a ratio of
    them cancels the load that changes from round to round)."""
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(repeats):
        for name, measure in measures.items():
            samples[name].append(measure())
    return samples


def in_scratch(main: Callable[..., int]) -> Callable[..., int]:
    """A benchmark's entry point whose temporary directories, and those of every process it starts (TMPDIR), land in
    one scratch directory, removed when it returns: its models, data, outputs and pods' volumes (before, 40-odd CI
    runs had left 631 directories, 6 GB, in /tmp)."""
    @functools.wraps(main)
    def run(*args, **kwargs) -> int:
        with scratch_directory():
            return main(*args, **kwargs)
    return run


@contextlib.contextmanager
def scratch_directory():
    root = tempfile.mkdtemp(prefix="bench-scratch-")
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = root, root
    try:
        yield Path(root)
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
        shutil.rmtree(root, ignore_errors=True)


def clean_env(**settings) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "LOCAL_", "WORLD_", "GROUP_", "MASTER_", "TORCHELASTIC", "PET_"))}
    env.update({"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)})
    env.update({key: str(value) for key, value in settings.items()})
    return env


def launch_until(command: list[str], env: dict, done: Callable[[str], bool], timeout: float) -> tuple[float, list[str]]:
    """Start ``command``; return (seconds from launch to the first line where ``done`` holds, lines read).

    The process is killed as soon as that line appears: what comes after does not count.
    """
    from localjob.podspec import POD_MARKER
    from localjob.processes import kill_pod

    # torchrun starts its workers in sessions of their own: killing its process group would leave them
    # training in the background, slowing every later measurement. A marker in the environment finds them.
    marker = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    started = time.perf_counter()
    process = subprocess.Popen(command, env={**env, POD_MARKER: marker}, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if done(line):
                return time.perf_counter() - started, lines
            if time.perf_counter() - started > timeout:
                break
        return float("inf"), lines
    finally:
        kill_pod(marker)
        process.wait()


def peak_rss_per_rank(command: list[str], env: dict, world: int) -> float:
    """Largest peak resident memory (MiB) of ``world`` ranks of ``command``, each started by hand (env://)
    and measured by wait4."""
    port = free_port()
    base = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0"}
    processes = [subprocess.Popen(command, env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(world)]
    peaks = []
    for process in processes:
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} at world size {world} failed ({process.returncode})")
        peaks.append(usage.ru_maxrss / 1024)
    return max(peaks)


def median_or_none(values: list[float | None]) -> float | None:
    """The median; None where a run lacks the figure (a CUDA peak of a run on the CPU)."""
    known = [value for value in values if value is not None]
    return statistics.median(known) if known and len(known) == len(values) else None


def usage_log_cuda_peak(output_dir: Path) -> float | None:
    """The largest peak CUDA memory (MiB) of any rank: the last line of each OUTPUT_DIR/logs/usage-rank<R>.log
    (trainer_runtime.usage_log); None for a run on the CPU."""
    from trainer_runtime.usage_log import cuda_peak_of

    peaks = [cuda_peak_of(log.read_text().splitlines()[-1]) for log in (output_dir / "logs").glob("usage-rank*.log")]
    known = [peak for peak in peaks if peak is not None]
    return max(known) if known and len(known) == len(peaks) else None


def written_cuda_peak(directory: Path) -> float | None:
    """The largest of the baselines' cuda-peak-rank<R>.txt (written on CUDA only); None for a run on the CPU."""
    peaks = [float(path.read_text()) for path in directory.glob("cuda-peak-rank*.txt")]
    return max(peaks) if peaks else None


def verdict(ratio: float, limit: float, at_most: bool) -> str:
    ok = ratio <= limit if at_most else ratio >= limit
    return f"{'≤' if at_most else '≥'} {limit:g} {'met' if ok else 'MISSED'}"


def render_rows(rows: list[tuple[str, ...]]) -> str:
    """A results table: the first row its header, columns padded, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def mnist_bench_parser(prog: str, doc: str | None, quick: str, repeats: int | None) -> argparse.ArgumentParser:
    """What every bench of the MNIST worker takes: --data-dir (default: the worker's digits), --quick, --repeats."""
    parser = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, help="directory with MNIST/raw/ (default: the worker's digits)")
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--repeats", type=int, default=repeats, help="alternating repetitions per figure (median)")
    return parser


def say_machine() -> None:
    """Under a bench's table: where and when it was measured."""
    print(f"\n({os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", file=sys.stderr)


def worlds(quick: bool) -> tuple[int, ...]:
    """The world sizes of the rows measured per world size: the quick mode checks that the code runs, and world
    size 2 runs every line world size 1 does."""
    return (2,) if quick else (1, 2)


def launcher_command(world: int, module: str, *args: str) -> list[str]:
    """The pod's launcher as the image runs it (python -m worker.launch: torchrun's, in place) starting ``world``
    processes of ``module``."""
    return [sys.executable, "-m", "worker.launch", "--standalone", f"--nproc-per-node={world}", "-m", module, *args]


def launched(module: str, args: list[str], env: dict, world: int, timeout: float = 3600) -> subprocess.CompletedProcess:
    """``module`` run to its end under the launcher; a failure raises, with the end of what it printed."""
    result = subprocess.run(launcher_command(world, module, *args), env=env, capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{module} failed ({result.returncode}): {result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result
