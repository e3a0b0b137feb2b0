"""python -m worker.sft with checkpoint.storage_uri, against moto's S3 (testbed/storage_servers.py), two processes
under the launcher: rank 0 mirrors each checkpoint (the adapters and their optimizer state) beside the training; a
run killed on one volume resumes on an empty one from the bucket, restored by the stage step as the render runs it
(python -m worker.staging --program worker.sft), and exports the adapter of a run that was never killed, bit for
bit."""

from __future__ import annotations

import pytest

from tests.sft.test_sft_training import adapter_of, run_sft, world  # noqa: F401 -- world: a fixture
from tests.stager.test_checkpoint_mirror import killed_then_resumed_from_the_bucket
from trainer_contract import storage

pytestmark = pytest.mark.slow
pytest.importorskip("moto")

URI = "s3://team-ckpt/sft"
# 2 epochs of 6 steps: checkpoints every 5 steps and at each epoch's end (5, 6, 10, 12); the newest only kept
SHORT = {"EPOCHS": "2", "KEEP_CHECKPOINTS": "1", storage.URI_VARIABLES["checkpoint"]: URI}


def test_a_killed_run_resumes_on_an_empty_volume_from_the_bucket_bit_identical(
        world, checkpoint_s3, tmp_path):  # noqa: F811
    model, data = world
    # rank 0 stalls before step 11 (the mirror has step 10 in the bucket meanwhile), then dies
    second = killed_then_resumed_from_the_bucket(
        lambda volume, settings: run_sft(model, data, volume, settings), "worker.sft", URI, checkpoint_s3.environ,
        SHORT, tmp_path, whole={"EPOCHS": "2"}, fault_at="2.5", mirrored=10, total=12)
    expected, got = adapter_of(tmp_path / "whole"), adapter_of(second)
    assert expected.keys() == got.keys() and all((expected[key] == got[key]).all() for key in expected)
