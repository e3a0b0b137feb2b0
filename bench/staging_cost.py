"""Staging against the libraries' own downloads of the same files, side by side in one run, and what a rerun
fetches.

    python -m bench.staging_cost     # these rows of docs/performance.md alone (python -m bench: all)

Both contenders are a fresh process that fetches the same files from the same server on 127.0.0.1 into an
empty directory, alternating: `python -m worker.staging` (which also verifies every file and publishes it
atomically) against `huggingface_hub.snapshot_download(local_dir=...)` for the Hub (testbed/storage_servers.py's
Hub, which huggingface_hub talks to through HF_ENDPOINT) and against boto3's `download_file` of every object for
S3 (moto's server). Every byte either sends or receives passes a counting proxy, so the rerun's row is the bytes
the network carried when the marker is there (goal: 0).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.stats import BIN, ROOT, alternate, verdict
from trainer_contract import storage

MB = 1_000_000
REPO = "bench/tiny-model"
BUCKET, PREFIX = "bench-data", "model"


def payload(size_mb: int) -> dict[str, bytes]:
    """A model repository's shape: two large weight files and small metadata."""
    half = size_mb * MB // 2
    return {"model-00001-of-00002.safetensors": os.urandom(half), "model-00002-of-00002.safetensors": os.urandom(half),
            "config.json": b'{"model_type": "bert", "hidden_size": 32}\n', "vocab.txt": b"[PAD]\n[UNK]\nhello\n"}


class CountingProxy:
    """A TCP proxy on 127.0.0.1 in front of ``port``: every connection forwarded, the bytes either way counted."""

    def __init__(self, port: int):
        self.target, self.bytes, self.connections = port, 0, 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.connections += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(1 << 20):
                sink.sendall(chunk)
                with self.lock:
                    self.bytes += len(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} exited {result.returncode}: {result.stdout[-2000:]}")
    return time.perf_counter() - started


def _stager(uri: str, place: Path, extra: dict[str, str]) -> tuple[Callable[[], float], Callable[[], float]]:
    """The stager into an empty ``place`` (timed), and the stager again where it has staged."""
    env = {"PATH": os.environ["PATH"], "HOME": str(place.parent), "JOB_COMPLETION_INDEX": "0",
           storage.URI_VARIABLES["model"]: uri, storage.STAGED["model"].path: str(place), **extra}
    command = [str(BIN / "python"), "-m", "worker.staging"]

    def fresh() -> float:
        shutil.rmtree(place, ignore_errors=True)
        return _timed(command, env)

    return fresh, lambda: _timed(command, env)


_SNAPSHOT = "import sys; from huggingface_hub import snapshot_download; snapshot_download(sys.argv[1], local_dir=sys.argv[2])"
_BOTO3 = ("import sys, boto3, pathlib; s3 = boto3.client('s3'); bucket, prefix, into = sys.argv[1:4]\n"
          "for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + '/')['Contents']:\n"
          "    target = pathlib.Path(into, item['Key'][len(prefix) + 1:]); target.parent.mkdir(parents=True, exist_ok=True)\n"
          "    s3.download_file(bucket, item['Key'], str(target))\n")


def _library(script: str, args: list[str], place: Path, extra: dict[str, str]) -> Callable[[], float]:
    env = {"PATH": os.environ["PATH"], "HOME": str(place.parent), **extra}

    def once() -> float:
        shutil.rmtree(place, ignore_errors=True)
        return _timed([str(BIN / "python"), "-c", script, *args, str(place)], env)

    return once


def _side_by_side(name: str, stager: tuple[Callable[[], float], Callable[[], float]], library: Callable[[], float],
                  size: int, repeats: int, proxy: CountingProxy) -> dict:
    fresh, again = stager
    medians = alternate({"stager": fresh, "library": library}, repeats)
    fresh()  # what the rerun finds: staged, with its marker
    before = proxy.bytes
    again()
    return {"source": name, "mb": size / MB, "stager_s": medians["stager"], "library_s": medians["library"],
            "ratio": medians["library"] / medians["stager"], "rerun_bytes": proxy.bytes - before}


def measure(size_mb: int = 200, repeats: int = 7) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: one line per request otherwise
    from testbed.storage_servers import HubServer, S3Server

    files = payload(size_mb)
    size = sum(len(data) for data in files.values())
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-staging-") as scratch:
        work = Path(scratch)
        hub = HubServer()
        hub.add(REPO, files)
        proxy = CountingProxy(int(hub.url.rsplit(":", 1)[1]))
        try:
            env = {"HF_ENDPOINT": proxy.url, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(work / "hf-home")}
            rows.append(_side_by_side("the Hub (huggingface_hub.snapshot_download)",
                                      _stager(f"hf://{REPO}", work / "hub-staged", env),
                                      _library(_SNAPSHOT, [REPO], work / "hub-library", env), size, repeats, proxy))
        finally:
            proxy.close()
            hub.close()
        s3 = S3Server()
        proxy = CountingProxy(s3.port)
        try:
            client = s3.client()
            client.create_bucket(Bucket=BUCKET)
            for name, data in files.items():
                client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}", Body=data)
            env = {**s3.environ, "AWS_ENDPOINT_URL": proxy.url}
            rows.append(_side_by_side("S3 (boto3 download_file)", _stager(f"s3://{BUCKET}/{PREFIX}", work / "s3-staged", env),
                                      _library(_BOTO3, [BUCKET, PREFIX], work / "s3-library", env), size, repeats, proxy))
        finally:
            proxy.close()
            s3.close()
    return rows


def rows(measured: list[dict]) -> list[tuple[str, ...]]:
    """The bench's rows (bench/cli.py): staging throughput against the library's, and the rerun's bytes."""
    table = []
    for row in measured:
        table.append((f"staging {row['mb']:.0f} MB from {row['source']} (s)", f"{row['stager_s']:.2f}",
                      f"{row['library_s']:.2f}", f"{row['ratio']:.2f}", verdict(row["ratio"], 0.9, False)))
        table.append((f"staging again from {row['source'].split(' (')[0]}: bytes on the network", str(row["rerun_bytes"]),
                      "-", "-", "0" if row["rerun_bytes"] == 0 else "MISSED (goal 0)"))
    return table


if __name__ == "__main__":

    for line in rows(measure()):
        print(" | ".join(line))
