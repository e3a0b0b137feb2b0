"""python -m worker.sft as the rendered Job runs it: 2 pods under local-job (the check-config init container, the
launcher, torchrun and gloo), a worker SIGKILLed mid-run and restarted in place, the adapter exported on the
volume."""

from __future__ import annotations

import json

import pytest

from testbed.sft_data import make_chat_data, make_model
from tests.localjob.test_local_job_runs import run_local_job
from tests.mnist.launch import fault_env
from tests.rendering import gen_manifests
from trainer_contract import gang_ledger

pytestmark = pytest.mark.slow
pytest.importorskip("peft")

SETTINGS = ("{MODEL_DIR: /pvc-home/model, DATASET_DIR: /pvc-home/data, EPOCHS: '2', BATCH_SIZE: '8', "
            "LEARNING_RATE: '0.01', LORA_RANK: '8', LORA_ALPHA: '16', MAX_SEQ_LENGTH: '64', "
            "CHECKPOINT_EVERY_STEPS: '4', LOG_INTERVAL: '4', TENSORBOARD: 'false'}")


def test_two_pods_fine_tune_restart_a_killed_worker_in_place_and_export_the_adapter(tmp_path):
    claim = tmp_path / "volume"
    make_model(claim / "model")
    make_chat_data(claim / "data")
    manifests = gen_manifests("name=sft", "replicas=2", "entrypoint.module=worker.sft", f"config_map={SETTINGS}")
    # 96 examples, 2 ranks of batch 8: 6 steps an epoch; killed before step 9, after the checkpoint of step 8
    result, log, status = run_local_job(tmp_path, manifests, claim, claim="sft-data",
                                        env=fault_env("sigkill@batch=2.3,rank=1,attempt=0"))
    assert result.returncode == 0, log[-5000:] + result.stderr.decode()[-2000:]
    assert status["condition"]["type"] == "Complete" and status["restarts"] == {"0": 0, "1": 0}
    assert "Rank 0: process group: gloo, world size 2 (2 nodes x 1)" in log
    assert "round 1 failed: this pod's worker failed with exit code 137; restarting in place" in log
    assert "Rank 0: resuming from step-00000008.ckpt" in log
    output = claim / "runs" / "sft"
    adapter = output / "llama_sft_trained" / "adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    summary = json.loads((output / "summary.json").read_text())
    assert summary["step"] == 12 and summary["perplexity"] > 1
    # each node recorded which launcher it was in the last round: index 0's launcher knows a vanished pod
    for node in (0, 1):
        token = (output / gang_ledger.DIRECTORY / f"{node}.{gang_ledger.ATTEMPT}").read_text()
        assert token.startswith(f"{node}-") and len(token.split()) == 1
