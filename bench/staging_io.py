"""Staging's throughput against the libraries' own parallel or plain downloads of the same bytes, side by side in
one run, from servers on 127.0.0.1 (issue 77, item 5):

    python -m bench.checkpoint_io --only staging [--megabytes 64] [--repeats 5]

- the Hub: the stager (`trainer_stager.cli.stage`: TRANSFERS files at a time, every file verified against the
  Hub's listing, published atomically) against `huggingface_hub.snapshot_download(max_workers=8)` of the same
  repository (testbed/storage_servers.py's Hub, through HF_ENDPOINT);
- https: the stager's ranged parallel download of one large file (its SHA-256 recorded) against one stream of
  the same file (urllib into shutil.copyfileobj), and against that stream hashing what it writes (the same
  work), from a file server that serves ranges.

Each contender is a fresh process that imports first and then times only its transfer into an empty directory,
alternating; a row gives each side's median rate (MB, 10^6 bytes, a second) and the median of the rounds' ratios
(ours over the baseline's rate). Target: ours ≥ 0.9× the baseline.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench.staging_cost import REPO, payload
from bench.stats import BIN, ROOT, alternate_samples

MB = 1_000_000
TARGET = 0.9
DEFAULT_MEGABYTES = 64
REPEATS = 5

# Each prints the seconds its transfer took, last, after its imports
_STAGER = ("import os, sys, time; from pathlib import Path; from trainer_contract import storage; "
           "from trainer_stager import cli, fetch_hf, fetch_https; import huggingface_hub\n"
           "role, text, where = sys.argv[1:4]; uri = storage.parse(text, role); started = time.perf_counter()\n"
           "cli.stage(role, uri, Path(where), os.environ); print(time.perf_counter() - started)\n")
_SNAPSHOT = ("import sys, time; from huggingface_hub import snapshot_download; started = time.perf_counter()\n"
             "snapshot_download(sys.argv[1], local_dir=sys.argv[2], max_workers=8); "
             "print(time.perf_counter() - started)\n")
_ONE_STREAM = ("import shutil, sys, time, urllib.request; started = time.perf_counter()\n"
               "with urllib.request.urlopen(sys.argv[1], timeout=60) as answer, open(sys.argv[2], 'wb') as out:\n"
               "    shutil.copyfileobj(answer, out, 1 << 20)\n"
               "print(time.perf_counter() - started)\n")
# The same stream hashing what it writes, as the stager does (it records the file's SHA-256): the same work
_ONE_STREAM_HASHED = ("import hashlib, sys, time, urllib.request; started = time.perf_counter(); digest = hashlib.sha256()\n"
                      "with urllib.request.urlopen(sys.argv[1], timeout=60) as answer, open(sys.argv[2], 'wb') as out:\n"
                      "    while chunk := answer.read(1 << 20):\n"
                      "        out.write(chunk); digest.update(chunk)\n"
                      "print(time.perf_counter() - started)\n")


def _timed(script: str, args: list[str], into: Path, env: dict[str, str]) -> Callable[[], float]:
    """A fresh process running ``script`` into ``into`` (a directory or a file), absent before: the seconds it says
    its transfer took."""
    def once() -> float:
        if into.is_dir():
            shutil.rmtree(into)
        into.unlink(missing_ok=True)
        into.parent.mkdir(parents=True, exist_ok=True)
        result = subprocess.run([str(BIN / "python"), "-c", script, *args], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{script.splitlines()[0][:60]}... exited {result.returncode}: {result.stdout[-2000:]}")
        return float(result.stdout.strip().splitlines()[-1])
    return once


def _row(phase: str, size: int, ours: Callable[[], float], baseline: Callable[[], float], repeats: int) -> dict:
    """Each side's median throughput, and the median of the rounds' ratios (each round's pair run back to back:
    the shared machine's load changes from round to round far more than between the two)."""
    samples = alternate_samples({"ours": ours, "baseline": baseline}, repeats)
    ratios = [theirs / mine for mine, theirs in zip(samples["ours"], samples["baseline"], strict=True)]
    return {"phase": phase, "mb": round(size / MB, 1),
            "ours_mb_s": round(size / MB / statistics.median(samples["ours"]), 1),
            "baseline_mb_s": round(size / MB / statistics.median(samples["baseline"]), 1),
            "ratio": round(statistics.median(ratios), 2), "target": TARGET}


def measure(work: Path, megabytes: int = DEFAULT_MEGABYTES, repeats: int = REPEATS) -> list[dict]:
    """The rows: the Hub's and https's staging against their baselines, ``megabytes`` each, in ``work``."""
    sys.path.insert(0, str(ROOT))
    from testbed.storage_servers import FileServer, HubServer

    env = {"PATH": os.environ["PATH"], "HOME": str(work), "PYTHONPATH": str(ROOT), "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HOME": str(work / "hf-home"), "JOB_COMPLETION_INDEX": "0"}
    rows = []
    files = payload(megabytes)
    hub = HubServer()
    try:
        hub.add(REPO, files)
        hub_env = {**env, "HF_ENDPOINT": hub.url}
        rows.append(_row("the Hub: stager vs snapshot_download(max_workers=8)", sum(map(len, files.values())),
                         _timed(_STAGER, ["model", f"hf://{REPO}", str(work / "hub-ours")], work / "hub-ours", hub_env),
                         _timed(_SNAPSHOT, [REPO, str(work / "hub-baseline")], work / "hub-baseline", hub_env),
                         repeats))
    finally:
        hub.close()
    served = work / "served"
    served.mkdir(parents=True, exist_ok=True)
    with open(served / "weights.bin", "wb") as out:
        for _ in range(megabytes):
            out.write(os.urandom(MB))
    server = FileServer(served)
    server.ranges = True
    try:
        url = f"{server.url}/weights.bin"
        ours = _timed(_STAGER, ["model", url, str(work / "https-ours")], work / "https-ours", env)
        for phase, script in (("https: stager in ranged parts vs one stream (urllib)", _ONE_STREAM),
                              ("https: stager in ranged parts vs one stream hashing SHA-256 too", _ONE_STREAM_HASHED)):
            rows.append(_row(phase, megabytes * MB, ours, _timed(script, [url, str(work / "https-baseline.bin")],
                                                                 work / "https-baseline.bin", env), repeats))
    finally:
        server.close()
    return rows
