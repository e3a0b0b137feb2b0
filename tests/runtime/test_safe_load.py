"""Every checkpoint load is a safe load (trainer_runtime.checkpoints.safe_load): a checkpoint file, a sharded
checkpoint's DCP metadata and its non-tensor items that name a callable are refused with the file named, and the
callable never runs; checkpoints as the programs write them load as before."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainer_contract.settings import ConfigError  # noqa: E402
from trainer_runtime.checkpoints import safe_load, single_file  # noqa: E402


class Planted:
    """What an attacker's checkpoint holds: unpickling it calls Path.touch on a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_plain_checkpoint_loads(tmp_path):
    state = {"model": {"w": torch.arange(4.0)}, "step": 7, "lr": [0.1], "name": "x", "nested": {"a": (1, 2)}}
    torch.save(state, tmp_path / "ok.ckpt")
    loaded = safe_load.load(tmp_path / "ok.ckpt")
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["step"] == 7
    assert loaded["nested"] == {"a": (1, 2)}


@pytest.mark.parametrize("mmap", [False, True])
def test_a_checkpoint_naming_a_callable_is_refused_and_nothing_runs(tmp_path, mmap):
    marker = tmp_path / "ran"
    torch.save({"model": {}, "evil": Planted(marker)}, tmp_path / "step-00000009.ckpt")
    with pytest.raises(safe_load.UnsafeCheckpoint) as refused:
        safe_load.load(tmp_path / "step-00000009.ckpt", mmap=mmap)
    assert not marker.exists()
    assert isinstance(refused.value, ConfigError)  # the programs exit BAD_CONFIG (78) on it
    (line,) = refused.value.problems
    assert line.startswith("checkpoint step-00000009.ckpt was refused: ") and "RESUME=false" in line


def test_the_mnist_workers_checksummed_file_is_read_through_the_allow_list(tmp_path):
    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    torch.save({"model": {}, "evil": Planted(marker)}, buffer)  # a valid checksum over a planted payload
    payload = buffer.getvalue()
    import hashlib

    data = single_file.MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    with pytest.raises(safe_load.UnsafeCheckpoint, match="ckpt-e0001-s000000.pt was refused"):
        single_file.decode(data, "ckpt-e0001-s000000.pt")
    assert not marker.exists()


def _dcp_checkpoint(directory: Path, extra: dict) -> dict:
    import torch.distributed.checkpoint as dcp

    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "step": 3, **extra}
    dcp.save(state, checkpoint_id=str(directory), no_dist=True)
    return state


def test_a_sharded_checkpoint_loads_through_the_safe_reader(tmp_path):
    _dcp_checkpoint(tmp_path / "c.dcp", {"lr": 0.25})
    into = {"model": {"w": torch.zeros(2, 3)}, "step": 0, "lr": 0.0}
    safe_load.dcp_load(into, tmp_path / "c.dcp")
    assert torch.equal(into["model"]["w"], torch.arange(6.0).reshape(2, 3))
    assert into["step"] == 3 and into["lr"] == 0.25


def test_planted_dcp_metadata_is_refused_and_nothing_runs(tmp_path):
    _dcp_checkpoint(tmp_path / "c.dcp", {})
    marker = tmp_path / "ran"
    (tmp_path / "c.dcp" / ".metadata").write_bytes(pickle.dumps(Planted(marker)))
    with pytest.raises(safe_load.UnsafeCheckpoint, match=r"c.dcp/.metadata was refused: it names pathlib.Path.touch"):
        safe_load.dcp_load({"model": {"w": torch.zeros(2, 3)}, "step": 0}, tmp_path / "c.dcp")
    assert not marker.exists()


def test_a_planted_non_tensor_item_of_a_sharded_checkpoint_is_refused(tmp_path):
    marker = tmp_path / "ran"
    _dcp_checkpoint(tmp_path / "c.dcp", {"extra": Planted(marker)})  # DCP pickles a non-tensor item whole
    marker.unlink(missing_ok=True)
    with pytest.raises(safe_load.UnsafeCheckpoint, match="item extra was refused"):
        safe_load.dcp_load({"model": {"w": torch.zeros(2, 3)}, "step": 0, "extra": None}, tmp_path / "c.dcp")
    assert not marker.exists()


def test_no_product_code_loads_with_weights_only_false():
    from tests.conftest import PRODUCT_PACKAGES, ROOT

    offenders = [f"{path.relative_to(ROOT)}" for package in PRODUCT_PACKAGES
                 for path in sorted((ROOT / package).rglob("*.py"))
                 if "weights_only=False" in path.read_text(encoding="utf-8")]
    assert not offenders, f"load through trainer_runtime.checkpoints.safe_load instead: {offenders}"
