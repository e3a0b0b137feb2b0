"""MNIST-format files for tests: the real digits the installed worker ships, or synthetic ones.

Tests never download: they write IDX files themselves, or split the real MNIST test set that the worker ships
(worker/mnist/mnist-sample/, the 10,000 official test digits, byte-identical to ../shared/data/mnist-test-set; first
8,000 to train, last 2,000 to test) into the layout the worker reads. Read from the installed package, they are
there on every machine, with or without ../shared, and every documented accuracy is tested on them.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np

from worker.mnist import idx, mnist_sample


def idx_bytes(array: np.ndarray) -> bytes:
    return idx.encode(array.shape, array.astype(np.uint8).tobytes())


def read_idx(data: bytes) -> np.ndarray:
    shape, items = idx.split(data)
    return np.frombuffer(items, dtype=np.uint8).reshape(shape)


def real_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 10,000 official MNIST test digits, as the installed worker ships them (verified by their SHA-256)."""
    return read_idx(mnist_sample.read("t10k-images-idx3-ubyte")), read_idx(mnist_sample.read("t10k-labels-idx1-ubyte"))


def synthetic_digits(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Learnable fake digits: each class is one fixed random pattern (the same for every seed) plus noise."""
    prototypes = (np.random.default_rng(12345).random((10, 28, 28)) > 0.7) * 200.0
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count)
    noise = rng.normal(0, 30, (count, 28, 28))
    images = np.clip(prototypes[labels] + noise, 0, 255).astype(np.uint8)
    return images, labels.astype(np.uint8)


def raw_files(train: tuple, test: tuple) -> dict[str, bytes]:
    """The four decompressed files' names and contents."""
    return {
        "train-images-idx3-ubyte": idx_bytes(train[0]),
        "train-labels-idx1-ubyte": idx_bytes(train[1]),
        "t10k-images-idx3-ubyte": idx_bytes(test[0]),
        "t10k-labels-idx1-ubyte": idx_bytes(test[1]),
    }


def dataset_files(train_count: int = 8000, test_count: int = 2000, prefer_real: bool = True) -> dict[str, bytes]:
    if prefer_real:
        images, labels = real_digits()
        assert train_count + test_count <= len(images)
        train = images[:train_count], labels[:train_count]
        test = images[len(images) - test_count:], labels[len(images) - test_count:]
    else:
        images, labels = synthetic_digits(train_count + test_count)
        train, test = (images[:train_count], labels[:train_count]), (images[train_count:], labels[train_count:])
    return raw_files(train, test)


def write_raw(data_dir: Path, files: dict[str, bytes]) -> Path:
    """Write decompressed files where the worker reads them: DATA_DIR/MNIST/raw/."""
    raw = Path(data_dir) / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (raw / name).write_bytes(content)
    return raw


def write_mirror(directory: Path, files: dict[str, bytes]) -> Path:
    """Write the .gz archives a mirror serves, and a SHA256SUMS file of them; return the checksum file."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, content in files.items():
        archive = gzip.compress(content, mtime=0)
        (directory / f"{name}.gz").write_bytes(archive)
        lines.append(f"{hashlib.sha256(archive).hexdigest()}  {name}.gz")
    checksums = directory / "SHA256SUMS"
    checksums.write_text("\n".join(lines) + "\n")
    return checksums
