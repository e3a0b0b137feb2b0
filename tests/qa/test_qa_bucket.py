"""python -m worker.qa with checkpoint.storage_uri, against moto's S3 (testbed/storage_servers.py), under FSDP
with two processes: rank 0 mirrors each checkpoint (a directory of every rank's shards) file by file; a run killed
on one volume resumes on an empty one from the bucket, restored by the stage step as the render runs it (python -m
worker.staging --program worker.qa), and ends with the weights of a run that was never killed, bit for bit."""

from __future__ import annotations

import json

import pytest

from tests.exports import same_weights
from tests.qa.test_qa_training import run_qa, world  # noqa: F401 -- world: a fixture
from tests.stager.test_checkpoint_mirror import killed_then_resumed_from_the_bucket
from trainer_contract import storage

pytestmark = pytest.mark.slow
pytest.importorskip("moto")

URI = "s3://team-ckpt/bert-squad"
# 2 epochs of 8 steps under FSDP: checkpoints every 5 steps and at each epoch's end, the newest only kept (as in
# tests/finetune/test_finetune_bucket.py: then the bucket holds exactly what the volume holds)
SHORT = {"EPOCHS": "2", "STRATEGY": "fsdp", "KEEP_CHECKPOINTS": "1", storage.URI_VARIABLES["checkpoint"]: URI}


def test_a_killed_fsdp_run_resumes_on_an_empty_volume_from_the_bucket_bit_identical(
        world, checkpoint_s3, tmp_path):  # noqa: F811
    model, data = world
    # rank 0 stalls before batch 3 of epoch 2, step 11 (the mirror has step 10, every rank's shards, in the bucket
    # meanwhile), then dies
    second = killed_then_resumed_from_the_bucket(
        lambda volume, settings: run_qa(model, data, volume, settings), "worker.qa", URI, checkpoint_s3.environ,
        SHORT, tmp_path, whole={"EPOCHS": "2", "STRATEGY": "fsdp"}, fault_at="2.3", mirrored=10, total=16)
    assert (tmp_path / "first-volume" / "checkpoints" / "step-00000010.ckpt").is_dir()  # every rank's shards
    assert same_weights(tmp_path / "whole" / "bert_squad_trained", second / "bert_squad_trained")
    lines = [json.loads(line) for line in (second / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "loss" in line] == list(range(11, 17))
