"""MNIST in memory: one rank prepares the files, the others wait for its word; every rank then holds the
normalized images as one tensor and takes whole batches of its shard by indexing."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from trainer_contract import hooks
from trainer_contract.program_settings import TrainConfig
from trainer_runtime.distenv import DistEnv
from worker.mnist import idx, mnist_sample
from worker.mnist.mnist_files import OFFICIAL_MIRRORS, DataError, check_raw_files, download, raw_dir, read_checksums

MEAN, STD = 0.1307, 0.3081  # of the MNIST training images, as everyone normalizes them
FULL, SAMPLE = "mnist", "mnist-sample"  # what a run trains on: DATA_DIR's MNIST, or worker.mnist.mnist_sample


class PeerLost(Exception):
    """A peer did not answer in time or went away (exit_codes.PEER_LOST)."""


def _prepare_source(config: TrainConfig, log) -> str:
    """FULL once the four files are present and verified in DATA_DIR; SAMPLE when they cannot be had and
    MNIST_SAMPLE_FALLBACK allows the bundled sample (a run on one machine without network). Runs on one rank."""
    try:
        _prepare_files(config, log)
        return FULL
    except DataError as exc:
        if not config.mnist_sample_fallback:
            raise
        mnist_sample.read("t10k-labels-idx1-ubyte")  # the sample itself must be intact
        log(f"MNIST is unavailable ({str(exc).split('. ')[0]}); training on {mnist_sample.DESCRIPTION} "
            "(MNIST_SAMPLE_FALLBACK=true)")
        return SAMPLE


def _prepare_files(config: TrainConfig, log) -> None:
    """Make the four files present and verified, downloading them if allowed. Runs on one rank."""
    try:
        check_raw_files(raw_dir(config.data_dir))
        return
    except DataError as missing:
        if not config.download:
            raise DataError(
                f"MNIST is not in {raw_dir(config.data_dir)} ({missing}) and DOWNLOAD is false; put the four "
                "files there or set MNIST_MIRROR to a reachable copy") from None
        log(f"MNIST not ready in {raw_dir(config.data_dir)} ({missing}); downloading")
    mirrors = [config.mnist_mirror] if config.mnist_mirror else list(OFFICIAL_MIRRORS)
    checksums = read_checksums(config.mnist_checksums) if config.mnist_checksums else None
    try:
        download(config.data_dir, mirrors, checksums, timeout=min(60.0, config.download_timeout), log=log)
    except DataError as exc:
        raise DataError(f"{exc}. Without network access, set MNIST_MIRROR to a server holding the files, or put "
                        f"them in {raw_dir(config.data_dir)}") from None
    check_raw_files(raw_dir(config.data_dir))


def prepare(config: TrainConfig, env: DistEnv, store, log) -> str:
    """One rank per copy of DATA_DIR prepares it; the others wait for its verdict through the store.

    With a shared DATA_DIR that is global rank 0, else local rank 0 of each pod. The store (the process
    group's own) carries the outcome, so nobody relies on file locks, which many NFS servers ignore, and
    waiting is bounded by DOWNLOAD_TIMEOUT with a clear message instead of a 30-minute barrier.
    """
    preparer = env.rank == 0 if config.data_shared else env.local_rank == 0
    scope = "all" if config.data_shared else f"node-{env.group_rank}"
    key = f"indexed-trainer/data/{env.restart_count}/{scope}"
    if store is None:  # a single process
        return _prepare_source(config, log)
    if preparer:
        hooks.point("download")  # tests: the preparing rank dies while the others wait
        try:
            source = _prepare_source(config, log)
        except DataError as exc:
            store.set(key, json.dumps({"ok": False, "error": str(exc)}))
            raise
        except BaseException:  # SIGTERM (trainer_runtime.stop.Terminated) or a crash: the others need not wait it out
            store.set(key, json.dumps({"ok": False, "stopped": True}))
            raise
        store.set(key, json.dumps({"ok": True, "source": source}))
        return source
    who = "global rank 0" if config.data_shared else f"local rank 0 of node {env.group_rank}"
    verdict = _wait_for(store, key, config.download_timeout, who, log)
    if verdict.get("stopped"):
        raise PeerLost(f"{who} was stopped while preparing the data")
    if not verdict["ok"]:  # the preparing rank exits 69 and counts the failure; this rank is its victim
        raise PeerLost(f"{who} could not prepare the data: {verdict['error']}")
    if verdict.get("source") == SAMPLE:
        return SAMPLE
    try:  # the files must be visible here too: DATA_SHARED=true with a DATA_DIR that is not really shared?
        check_raw_files(raw_dir(config.data_dir))
    except DataError as exc:
        hint = ("DATA_SHARED=true needs DATA_DIR on a volume every pod mounts, else set DATA_SHARED=false so "
                "that each pod prepares its own copy") if config.data_shared else "is DATA_DIR the same path here?"
        raise DataError(f"{who} prepared the data but {raw_dir(config.data_dir)} here does not hold it ({exc}); "
                        f"{hint}") from None
    return FULL


WAIT_REPORT_SECONDS = 15.0  # a line this often while a rank waits for the data, so a long wait is never silent


def _wait_for(store, key: str, timeout: float, who: str, log) -> dict:
    """The verdict under ``key`` in the store, waited for at most ``timeout`` seconds in short polls: a blocking
    store.wait would hold off SIGTERM (Python runs signal handlers between its own instructions) for the whole
    wait."""
    began = time.monotonic()
    deadline, report = began + timeout, began + WAIT_REPORT_SECONDS
    while True:
        now = time.monotonic()
        if now >= report:
            log(f"waiting for {who} to prepare the data: {now - began:.0f} s of DOWNLOAD_TIMEOUT={timeout:g} s")
            report += WAIT_REPORT_SECONDS
        try:
            if store.check([key]):
                return json.loads(store.get(key))
        except Exception as exc:  # DistNetworkError: its host (torchrun of pod 0) is gone
            raise PeerLost(f"{who} went away while preparing the data ({type(exc).__name__}: {exc})") from None
        if time.monotonic() >= deadline:
            raise PeerLost(f"{who} did not finish preparing the data within DOWNLOAD_TIMEOUT={timeout:g} s")
        time.sleep(0.2)


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 28, 28] -> float32 [N, 1, 28, 28], zero mean and unit variance."""
    return images.float().div_(255).sub_(MEAN).div_(STD).unsqueeze(1).contiguous()


def read_idx(path: Path) -> torch.Tensor:
    """An IDX file of unsigned bytes (already checked by check_raw_files) as a uint8 tensor of its shape."""
    return parse_idx(path.read_bytes())


def parse_idx(data: bytes) -> torch.Tensor:
    shape, items = idx.split(data)
    return torch.frombuffer(bytearray(items), dtype=torch.uint8).reshape(shape)


def load_split(data_dir: Path, train: bool, limit: int = 0, source: str = FULL) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (normalized) and labels of one split from DATA_DIR/MNIST/raw/, torchvision's MNIST layout, or from
    the bundled sample (``source`` SAMPLE).

    The files are read directly, giving exactly torchvision.datasets.MNIST's ``data`` and ``targets``
    (a test checks it): importing torchvision would cost every rank about a second and 160 MiB.
    """
    if source == SAMPLE:
        images = parse_idx(mnist_sample.read("t10k-images-idx3-ubyte"))
        labels = parse_idx(mnist_sample.read("t10k-labels-idx1-ubyte"))
        part = slice(0, mnist_sample.TRAIN_COUNT) if train else slice(mnist_sample.TRAIN_COUNT, None)
        images, labels = images[part], labels[part]
    else:
        prefix = "train" if train else "t10k"
        images = read_idx(raw_dir(data_dir) / f"{prefix}-images-idx3-ubyte")
        labels = read_idx(raw_dir(data_dir) / f"{prefix}-labels-idx1-ubyte")
    if limit:
        images, labels = images[:limit], labels[:limit]
    return normalize(images), labels.long()


def shard_indices(count: int, world_size: int, rank: int, seed: int, epoch: int) -> torch.Tensor:
    """This rank's indices for ``epoch``: a permutation shared by all ranks (seeded by seed + epoch, as
    DistributedSampler does), dealt out round-robin. The shards are disjoint and together cover every
    index exactly once; their sizes differ by at most one (no padding, nothing dropped)."""
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(count, generator=generator)[rank::world_size]


def steps_per_epoch(count: int, world_size: int, batch_size: int) -> int:
    """The same for every rank: enough steps for the largest shard."""
    return math.ceil(math.ceil(count / world_size) / batch_size)


def images_before_step(count: int, world_size: int, batch_size: int, step: int) -> int:
    """Training images all ranks together have processed in an epoch's first ``step`` steps (shard r holds
    ceil((count - r) / world_size) images and takes batch_size of them per step): known to every rank without
    a collective, for the loss scaling of ddp and fsdp and for the curves' x-axis."""
    whole, larger = divmod(count, world_size)  # ``larger`` shards hold one image more
    taken = step * batch_size
    return larger * min(whole + 1, taken) + (world_size - larger) * min(whole, taken)
