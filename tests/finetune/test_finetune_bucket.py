"""python -m worker.finetune with checkpoint.storage_uri, against moto's S3 (testbed/storage_servers.py), two
processes under the launcher: rank 0 mirrors each checkpoint beside the training and the bucket holds what the
volume holds; a run killed on one volume resumes on an empty one from the bucket, restored by the stage step as
the render runs it (python -m worker.staging --program worker.finetune), and ends with the weights of a run that
was never killed, bit for bit."""

from __future__ import annotations

import json

import pytest

from tests.exports import same_weights
from tests.finetune.test_finetune_training import run_finetune, world  # noqa: F401 -- world: a fixture
from tests.stager.test_checkpoint_mirror import killed_then_resumed_from_the_bucket
from trainer_contract import storage

pytestmark = pytest.mark.slow
pytest.importorskip("moto")

URI = "s3://team-ckpt/hub-finetune"
# 2 epochs of 16 steps: checkpoints every 5 steps and at each epoch's end (16, 32). The newest only is kept: the
# mirror uploads the newest offered and skips an older one still waiting, so with more the bucket may lack one.
SHORT = {"EPOCHS": "2", "KEEP_CHECKPOINTS": "1", storage.URI_VARIABLES["checkpoint"]: URI}


def test_a_killed_run_resumes_on_an_empty_volume_from_the_bucket_bit_identical(
        world, checkpoint_s3, tmp_path):  # noqa: F811
    model, data = world
    # rank 0 stalls before step 24 (the mirror has step 20 in the bucket meanwhile), then dies; on an empty volume
    # the stage step restores step 20 and the run trains steps 21 to 32 only
    second = killed_then_resumed_from_the_bucket(
        lambda volume, settings: run_finetune(model, data, volume, settings), "worker.finetune", URI,
        checkpoint_s3.environ, SHORT, tmp_path, whole={"EPOCHS": "2"}, fault_at="2.8", mirrored=20, total=32)
    assert same_weights(tmp_path / "whole" / "bert_classifier_trained", second / "bert_classifier_trained")
    records = [json.loads(line) for line in (second / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in records if "accuracy" not in line] == list(range(21, 33))
