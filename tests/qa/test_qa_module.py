"""worker/qa/module.py's optimizer step on a tiny random BERT, in this process: the step updates the weights and
frees the gradients it used at once (not at the next backward, where Lightning zeroes them), so that the next
forward's activations never come on top of them."""

from __future__ import annotations

import pytest

from testbed.qa_data import make_model
from trainer_runtime.sampler import RankBatches

pytest.importorskip("transformers")
pytest.importorskip("lightning")


def test_the_optimizer_step_updates_the_weights_and_frees_the_gradients(tmp_path):
    import torch
    from transformers import AutoModelForQuestionAnswering

    from worker.qa.module import QuestionAnswering

    model = AutoModelForQuestionAnswering.from_pretrained(make_model(tmp_path / "model"))
    module = QuestionAnswering(model, learning_rate=1e-2, total_steps=1, shard=False, shard_dtype=None,
                               train_batches=RankBatches(8, 4, 0, 1, 0, True), evaluation=None, record={},
                               evaluated=lambda *_: None)
    optimizer = module.configure_optimizers()["optimizer"]
    batch = {"input_ids": torch.randint(5, 60, (4, 16)), "start_positions": torch.tensor([1, 2, 3, 4]),
             "end_positions": torch.tensor([1, 2, 3, 4])}
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}

    def closure():
        loss = module(batch).loss
        loss.backward()
        return loss

    module.optimizer_step(0, 0, optimizer, closure)

    assert all(parameter.grad is None for parameter in model.parameters())
    assert any(not torch.equal(before[name], parameter) for name, parameter in model.named_parameters())
