"""Each transformer program with checkpoint.storage_uri, against moto's S3 (testbed/storage_servers.py), two
processes under the launcher: each checkpoint is mirrored beside the training (by rank 0, or by every rank its own
shards where the program's loop writes them) and the bucket holds what the volume holds; a run killed on one volume
resumes on an empty one from the bucket, restored by the stage step as the render runs it (python -m worker.staging
--program PROGRAM) or, a sharded one of the program's loop, by every rank a share as it starts, and ends as a run
that was never killed, bit for bit: the same weights, or the same adapters."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed import qa_data, sft_data
from tests.exports import same_weights
from tests.mnist.launch import run_workload
from tests.stager.test_checkpoint_mirror import killed_then_resumed_from_the_bucket

pytestmark = pytest.mark.slow
pytest.importorskip("moto")


def _same_adapters(whole: Path, resumed: Path) -> bool:
    from tests.sft.test_sft_training import adapter_of

    expected, got = adapter_of(whole), adapter_of(resumed)
    return expected.keys() == got.keys() and all((expected[key] == got[key]).all() for key in expected)


def _same_full_model(whole: Path, resumed: Path) -> bool:
    return same_weights(*(next(output.glob("llama_sft_trained/**/model.safetensors")).parent
                          for output in (whole, resumed)))


def _same_export(name: str) -> Callable[[Path, Path], bool]:
    return lambda whole, resumed: same_weights(whole / name, resumed / name)


@dataclass(frozen=True)
class Program:
    """A program's round trip: rank 0 stalls before batch ``fault_at`` (epoch.batch) while the mirror uploads step
    ``mirrored``, then dies; the run on the empty volume trains from there to ``total``."""

    module: str
    world: Callable[[Path], tuple[Path, Path]]  # its model and data, made under a directory
    settings: str  # the module of its training tests, whose SETTINGS it runs with
    whole: dict[str, str]
    fault_at: str
    mirrored: int
    total: int
    same: Callable[[Path, Path], bool]  # the never-killed run's OUTPUT_DIR and the resumed one's end alike
    step_lines: Callable[[dict], bool] | None = None  # metrics.jsonl's lines of training steps, where checked
    sharded: bool = False
    by_ranks: bool = False  # a sharded checkpoint of the program's own loop: moved by every rank (bucket_shares.py)


PROGRAMS = [
    # a full fine-tune under FSDP, 2 epochs of 6 steps: every rank uploads its shards and, on the empty volume,
    # fetches a share of them back; killed before step 11, resumed from 10
    pytest.param(Program(
        "worker.sft", lambda root: (sft_data.make_model(root / "model"), sft_data.make_chat_data(root / "data")),
        "tests.sft.test_sft_training", {"EPOCHS": "2", "STRATEGY": "fsdp", "LORA_RANK": "0", "LEARNING_RATE": "0.001"},
        "2.5", 10, 12, _same_full_model, by_ranks=True), id="sft-full-fsdp"),
    # 2 epochs of 8 steps under FSDP: killed before step 11, resumed from 10 (every rank's shards)
    pytest.param(Program(
        "worker.qa", lambda root: (qa_data.make_model(root / "model"),
                                   qa_data.make_squad(root / "data", train=256, validation=64)),
        "tests.qa.test_qa_training", {"EPOCHS": "2", "STRATEGY": "fsdp"}, "2.3", 10, 16,
        _same_export("bert_squad_trained"), lambda line: "loss" in line, sharded=True), id="qa-fsdp"),
    # 2 epochs of 6 steps (checkpoints at 5, 6, 10, 12): killed before step 11, resumed from 10
    pytest.param(Program(
        "worker.sft", lambda root: (sft_data.make_model(root / "model"), sft_data.make_chat_data(root / "data")),
        "tests.sft.test_sft_training", {"EPOCHS": "2"}, "2.5", 10, 12, _same_adapters), id="sft"),
]


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_killed_run_resumes_on_an_empty_volume_from_the_bucket_bit_identical(program, checkpoint_s3, tmp_path,
                                                                              request):
    import importlib

    model, data = program.world(tmp_path / "world")
    settings = importlib.import_module(program.settings).SETTINGS
    uri = f"s3://team-ckpt/{request.node.callspec.id}"  # the moto server lives as long as the session
    second = killed_then_resumed_from_the_bucket(
        lambda volume, extra: run_workload(program.module, settings, model, data, volume, extra), program.module, uri,
        checkpoint_s3.environ, tmp_path, whole=program.whole, fault_at=program.fault_at, mirrored=program.mirrored,
        total=program.total, by_ranks=program.by_ranks)
    assert program.same(tmp_path / "whole", second)
    if program.sharded:
        assert (tmp_path / "first-volume" / "checkpoints" / f"step-{program.mirrored:08d}.ckpt").is_dir()
    if program.step_lines is not None:
        lines = [json.loads(line) for line in (second / "metrics.jsonl").read_text().splitlines()]
        assert [line["step"] for line in lines if program.step_lines(line)] == list(
            range(program.mirrored + 1, program.total + 1))
