"""worker.sft as replica groups (trainer_runtime/pretrained/replicated.py): a step's loss is a mean over supervised
tokens, so the groups' gradients are summed with their token counts and divided by the step's whole count."""

from __future__ import annotations

import json

import pytest

from testbed.sft_data import make_chat_data, make_model
from tests.mnist.launch import run_workload
from tests.mnist.test_replica_groups import run_workload_groups
from tests.sft.test_sft_training import ADAPTER, SETTINGS, evaluations

pytestmark = pytest.mark.slow
pytest.importorskip("torchft", reason="replica groups need the [replicas] extra (torchft)")
pytest.importorskip("peft")


def test_two_groups_learn_the_chats_as_the_gang_does_and_both_export_the_adapter(tmp_path):
    """Two groups of 1 process and the gang of 2 processes (LoRA, the chats of the sft tests) take the same texts at
    every step (the epoch's order's blocks): the groups' evaluation losses follow the gang's (a step's loss is the
    mean over all its tokens for the groups, the mean of the ranks' means for the gang: close, not equal); both
    groups finish and export, one adapter in place."""
    model, data = make_model(tmp_path / "model"), make_chat_data(tmp_path / "data")
    output = tmp_path / "out"
    (code0, out0), (code1, out1) = run_workload_groups("worker.sft", {**SETTINGS, "SAMPLE_PROMPTS": ""}, model,
                                                       data, output)
    assert (code0, code1) == (0, 0), out0[-3000:] + out1[-3000:]
    assert "Traceback" not in out0 + out1
    gang = run_workload("worker.sft", {**SETTINGS, "SAMPLE_PROMPTS": ""}, model, data, tmp_path / "gang")
    assert gang.returncode == 0, gang.stderr[-3000:]
    losses, gangs = evaluations(output), evaluations(tmp_path / "gang")  # group 0's records; the gang's
    assert len(losses) == len(gangs) == 4 and losses[-1] < 0.7 * losses[0], losses
    assert all(abs(ours - theirs) < 0.02 * theirs for ours, theirs in zip(losses, gangs, strict=True)), (losses, gangs)
    summary = json.loads((output / "summary.json").read_text())
    assert summary["replica_groups"] == 2 and summary["world_size"] == 2
    assert (output / ADAPTER).exists() and not list(output.glob("**/.tmp-*"))
    assert out0.count("exported to ") == out1.count("exported to ") == 1
