"""MNIST in memory: one rank prepares the files, the others wait for its word; every rank then holds the
normalized images as one tensor and takes whole batches of its share (trainer_runtime.sampler, unpadded) by
indexing."""

from __future__ import annotations

from pathlib import Path

import torch

from trainer_contract import hooks
from trainer_contract.program_settings import TrainConfig
from trainer_runtime.distenv import DistEnv
from trainer_runtime.prepared_once import Preparation, prepared_once
from worker.mnist import idx, mnist_sample
from worker.mnist.mnist_files import OFFICIAL_MIRRORS, DataError, check_raw_files, download, raw_dir, read_checksums

MEAN, STD = 0.1307, 0.3081  # of the MNIST training images, as everyone normalizes them
FULL, SAMPLE = "mnist", "mnist-sample"  # what a run trains on: DATA_DIR's MNIST, or worker.mnist.mnist_sample


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
    """One rank per copy of DATA_DIR prepares it (trainer_runtime.prepared_once): global rank 0 with a shared
    DATA_DIR, else local rank 0 of each pod; the others wait for its verdict, at most DOWNLOAD_TIMEOUT."""
    if store is None:  # a single process
        return _prepare_source(config, log)
    preparer = env.rank == 0 if config.data_shared else env.local_rank == 0
    scope = "all" if config.data_shared else f"node-{env.group_rank}"
    who = "global rank 0" if config.data_shared else f"local rank 0 of node {env.group_rank}"
    key = f"indexed-trainer/data/{env.restart_count}/{scope}"
    preparation = Preparation("prepare the data", "preparing the data", key, who, config.download_timeout,
                              "DOWNLOAD_TIMEOUT")

    def prepared() -> str:
        hooks.point("download")  # tests: the preparing rank dies while the others wait
        return _prepare_source(config, log)

    source = prepared_once(preparation, store, preparer, prepared, DataError, log)
    if preparer or source == SAMPLE:
        return source
    try:  # the files must be visible here too: DATA_SHARED=true with a DATA_DIR that is not really shared?
        check_raw_files(raw_dir(config.data_dir))
    except DataError as exc:
        hint = ("DATA_SHARED=true needs DATA_DIR on a volume every pod mounts, else set DATA_SHARED=false so "
                "that each pod prepares its own copy") if config.data_shared else "is DATA_DIR the same path here?"
        raise DataError(f"{who} prepared the data but {raw_dir(config.data_dir)} here does not hold it ({exc}); "
                        f"{hint}") from None
    return FULL


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
