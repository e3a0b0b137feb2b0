"""The MNIST sample shipped with the worker (worker/mnist/mnist-sample/: the 10,000 official test digits, CC BY-SA 3.0),
for a run on one machine without network: the first 8,000 digits to train, the last 2,000 to test."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

from worker.mnist.mnist_files import DataError

SAMPLE_DIR = Path(__file__).resolve().parent / "mnist-sample"
SHA256 = {
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
TRAIN_COUNT = 8000
DESCRIPTION = ("the MNIST sample shipped with the worker: the 10,000 official test digits, the first 8,000 to "
               "train, the last 2,000 to test")


def read(name: str) -> bytes:
    """One of the sample's files, uncompressed and verified."""
    try:
        data = gzip.decompress((SAMPLE_DIR / f"{name}.gz").read_bytes())
    except (OSError, EOFError) as exc:
        raise DataError(f"the bundled MNIST sample is unreadable ({SAMPLE_DIR / name}.gz: {exc})") from None
    if hashlib.sha256(data).hexdigest() != SHA256[name]:
        raise DataError(f"the bundled MNIST sample {name} does not match its SHA-256; reinstall the worker")
    return data
