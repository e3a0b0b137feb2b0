"""worker.finetune as replica groups (trainer_runtime/pretrained/replicated.py), as a Job's pods would run them:
torchft's real Lighthouse and one launcher per group, restarting its workers in place, on one OUTPUT_DIR."""

from __future__ import annotations

import json
import re

import pytest

from testbed.qa_data import make_model
from testbed.text_data import make_texts
from tests.mnist.test_replica_groups import ledger, run_workload_groups

pytestmark = pytest.mark.slow
pytest.importorskip("torchft", reason="replica groups need the [replicas] extra (torchft)")
transformers = pytest.importorskip("transformers")

# 512 texts, 2 groups of 1 process x 16: 16 steps an epoch, 48 in all; every step lasts 0.25 s at least, so that a
# group's restart (seconds) is many steps of the other, and the job's end far enough for the restarted one to join
SETTINGS = {"EPOCHS": "3", "BATCH_SIZE": "16", "LEARNING_RATE": "0.005", "PRECISION": "bf16", "LOG_INTERVAL": "1",
            "CHECKPOINT_EVERY_STEPS": "5", "CHECKPOINT_EVERY_SECONDS": "0", "OMP_NUM_THREADS": "1"}


def test_a_killed_group_costs_that_group_and_every_text_is_taken_once_an_epoch(tmp_path):
    """Group 1's worker dies before the job's step 18 and its launcher restarts it: group 0 steps on alone
    with the whole step's texts, group 1 joins a later quorum with group 0's weights, AdamW's state and schedule;
    both finish, the last step's first group exports. Every committed step took its own 32 texts, every epoch every text once; the model
    learns as the gang's does."""
    model, data = make_model(tmp_path / "model", dropout=0.1), make_texts(tmp_path / "data", train=512, validation=64)
    output = tmp_path / "out"
    faults = {group: "; ".join(part for part in ("ledger@committed; sleep=0.25@batch", fault) if part)
              for group, fault in ((0, ""), (1, "sigkill@batch=2.2,attempt=0"))}
    (code0, out0), (code1, out1) = run_workload_groups("worker.finetune", SETTINGS, model, data, output, faults,
                                                       timeout=400)
    assert (code0, code1) == (0, 0), out0[-3000:] + out1[-3000:]
    assert "FAULT_INJECT: sigkill at batch=2.2" in out1 and "Traceback" not in out0 + out1, out1[-3000:]
    joins = [int(step) for step in re.findall(r"group1 joined at step (\d+), its state from a peer", out1)]
    assert "1 of 2 groups stepping from step" in out0 and joins and joins[-1] > 18, out0[-3000:] + out1[-3000:]
    steps: dict[int, list[int]] = {}
    for line in ledger(output):
        steps.setdefault(line["step"], []).extend(line["examples"])
    assert sorted(steps) == list(range(48))
    for epoch in range(3):
        taken = [example for step in range(epoch * 16, (epoch + 1) * 16) for example in steps[step]]
        assert sorted(taken) == list(range(512)), f"epoch {epoch + 1}"
    summary = json.loads((output / "summary.json").read_text())
    assert summary["replica_groups"] == 2 and summary["step"] == 48 and summary["world_size"] == 2
    assert summary["accuracy"] >= 90, summary  # two balanced classes: chance is 50
    exported = output / "bert_classifier_trained"
    assert {"config.json", "model.safetensors"} <= {path.name for path in exported.iterdir()}
    assert not list(output.glob(".tmp-*"))
    # one group exports and writes the summary (naming it); the other, not under a Job, ends at once
    writer = summary["written_by_group"]
    assert [out0, out1][writer].count("exported to ") == 1 and "exported to " not in [out0, out1][1 - writer]
    assert f"group{1 - writer}: the last step's first group writes the model; this group's part is done" in \
        [out0, out1][1 - writer]
    # group 0's records in OUTPUT_DIR, group 1's of its own; a checkpoint by the quorum's first group
    assert (output / "metrics.jsonl").exists() and (output / ".groups" / "1" / "metrics.jsonl").exists()
    assert list((output / "checkpoints").glob("step-*.ckpt"))
