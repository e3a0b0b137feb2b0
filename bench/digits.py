"""The benchmarks' default digits: one definition for every command of bench/ (python -m bench, bench.recovery,
bench.goodput), so that their numbers are measured on the same data."""

from __future__ import annotations

import tempfile
from pathlib import Path


def default_data_dir() -> Path:
    """The digits the worker ships (worker/mnist/mnist-sample: the 10,000 official MNIST test digits) as the four MNIST
    files, split as the worker's offline fallback splits them: the first 8,000 to train, the last 2,000 to test.
    Both contenders (the worker and torchvision's MNIST in the standard loop) read these files."""
    from worker.mnist import idx, mnist_sample

    (count, rows, cols), images = idx.split(mnist_sample.read("t10k-images-idx3-ubyte"))
    _, labels = idx.split(mnist_sample.read("t10k-labels-idx1-ubyte"))
    pixels, split = rows * cols, mnist_sample.TRAIN_COUNT
    raw = Path(tempfile.mkdtemp(prefix="bench-digits-")) / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, first, last in (("train", 0, split), ("t10k", split, count)):
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            idx.encode((last - first, rows, cols), images[first * pixels:last * pixels]))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx.encode((last - first,), labels[first:last]))
    return raw.parent.parent
