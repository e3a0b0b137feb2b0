"""What the tests of the transformer workloads compare: two exported models' weights, bit for bit."""

from __future__ import annotations

from pathlib import Path


def same_weights(first: Path, second: Path) -> bool:
    """Whether the ``save_pretrained`` directories ``first`` and ``second`` hold the same tensors, bit for bit."""
    from safetensors.torch import load_file

    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    return a.keys() == b.keys() and all((a[key] == b[key]).all() for key in a)
