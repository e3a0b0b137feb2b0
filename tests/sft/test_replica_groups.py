"""worker.sft as replica groups (trainer_runtime/pretrained/replicated.py): a step's loss is a mean over supervised
tokens, so the groups' gradients are summed with their token counts and divided by the step's whole count; under
fsdp each group shards the adapters over its processes and the groups replicate the shards."""

from __future__ import annotations

import json
import re

import pytest

from testbed.sft_data import make_chat_data, make_model
from tests.mnist.launch import run_workload
from tests.mnist.test_replica_groups import run_workload_groups
from tests.sft.test_sft_training import ADAPTER, SETTINGS, adapter_of, evaluations

pytestmark = pytest.mark.slow
pytest.importorskip("torchft", reason="replica groups need the [replicas] extra (torchft)")
pytest.importorskip("peft")


def test_groups_under_fsdp_make_one_gangs_updates_and_a_killed_rank_takes_its_shard_from_a_peer(tmp_path):
    """Two groups of 2 processes, each sharding the adapters (fsdp: hybrid sharding whose replicate dimension is
    the groups). Group 1's rank 1 dies at its 3rd step; the group restarts and takes each rank's shard of the
    adapters and of AdamW's state from the same rank of group 0, which steps on alone meanwhile. Every committed step
    is the 8 texts a one-process run takes with 4 batches of 2 accumulated, weighed by their supervised tokens as it
    weighs them: the exported adapter is that run's (up to the order of float sums)."""
    import torch

    model, data = make_model(tmp_path / "model"), make_chat_data(tmp_path / "data")
    short = {**SETTINGS, "EPOCHS": "2", "TRAIN_SAMPLES": "48", "EVAL_SAMPLES": "8", "BATCH_SIZE": "2",
             "SAMPLE_PROMPTS": "", "CHECKPOINT_EVERY_STEPS": "0"}
    output = tmp_path / "groups"
    (code0, out0), (code1, out1) = run_workload_groups(
        "worker.sft", {**short, "STRATEGY": "fsdp"}, model, data, output, processes=2,
        faults={0: "sleep=1@batch", 1: "sigkill@batch=1.3,rank=1,attempt=0"})
    assert (code0, code1) == (0, 0), out0[-3000:] + out1[-3000:]
    assert "Traceback" not in out0 + out1, out0[-3000:] + out1[-3000:]
    assert "FAULT_INJECT: sigkill at batch=1.3" in out1 and "under fsdp" in out0
    assert re.search(r"group1 joined at step \d+, its state from a peer", out1), out1[-3000:]
    # the last step's first group exports (its ranks gather the shards), the other ends at once
    summary = json.loads((output / "summary.json").read_text())
    assert summary["replica_groups"] == 2 and (out0 + out1).count("exported to ") == 1
    assert "exported to " in [out0, out1][summary["written_by_group"]]
    assert (output / ADAPTER).exists() and not list(output.glob("**/.tmp-*"))
    gang = run_workload("worker.sft", short, model, data, tmp_path / "gang", {"GRADIENT_ACCUMULATION_STEPS": "4"},
                        processes=1)
    assert gang.returncode == 0, gang.stdout[-3000:] + gang.stderr[-3000:]
    expected, got = adapter_of(tmp_path / "gang"), adapter_of(output)
    assert got.keys() == expected.keys()
    assert all(torch.allclose(got[key], expected[key], atol=1e-4) for key in expected)
    assert any(float(got[key].abs().sum()) > 0 for key in got if "lora_B" in key)  # it trained (B starts at 0)
    assert evaluations(output) == pytest.approx(evaluations(tmp_path / "gang"), rel=1e-3)
