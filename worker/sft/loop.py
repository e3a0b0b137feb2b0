"""What supervised fine-tuning adds to the runtime's loop (trainer_runtime.pretrained.loop): a batch of examples
padded with its labels, the evaluation (the mean loss over the supervised tokens of the whole held-out split,
summed across the gang, and its perplexity), and greedy completions of fixed prompts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from trainer_runtime.precision import Precision
from trainer_runtime.sharded_evaluation import evaluating, gang_sum, rank_batches
from worker.sft.examples import IGNORE, Example, chat


def collate(examples: list[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """One batch padded to its longest example: the padding attends nowhere and is never supervised."""
    longest = max(len(example.input_ids) for example in examples)
    pads = [longest - len(example.input_ids) for example in examples]
    return {"input_ids": torch.tensor([e.input_ids + [pad_id] * pad for e, pad in zip(examples, pads, strict=True)]),
            "labels": torch.tensor([e.labels + [IGNORE] * pad for e, pad in zip(examples, pads, strict=True)]),
            "attention_mask": torch.tensor([[1] * len(e.input_ids) + [0] * pad
                                            for e, pad in zip(examples, pads, strict=True)])}


def supervised_tokens(batch: dict[str, torch.Tensor]) -> int:
    """What a causal LM's loss on ``batch`` is the mean over: the labels it predicts (each but the first, shifted),
    padding and prompts left out (transformers' and so TRL's count, num_items_in_batch)."""
    return int((batch["labels"][:, 1:] != IGNORE).sum())


def evaluate(model: torch.nn.Module, examples: Sequence[Example], batch_size: int, pad_id: int, precision: Precision,
             device: torch.device, rank: int, world_size: int) -> dict[str, float]:
    """The mean loss per supervised token over the whole split (trainer_runtime.sharded_evaluation), and its
    perplexity."""
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # summed token losses, supervised tokens
    with evaluating(model):
        for (part,), counted in rank_batches(batch_size, rank, world_size, examples):
            batch = {key: value.to(device) for key, value in collate(part, pad_id).items()}
            labels = batch.pop("labels")
            with precision.autocast():
                logits = model(**batch).logits.float()
            shifted = labels[:, 1:]
            losses = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                       shifted.reshape(-1), ignore_index=IGNORE, reduction="sum")
            if counted:
                totals += torch.stack([losses.double(), (shifted != IGNORE).sum().double()])
    totals = gang_sum(totals, world_size)
    loss = float(totals[0] / totals[1].clamp(min=1))
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


@torch.no_grad()
def complete(model: Any, tokenizer: Any, prompts: list[str], device: torch.device, max_new_tokens: int = 32
             ) -> list[str]:
    """Greedy completions of ``prompts`` (rendered as a user turn where the tokenizer has a chat template); every
    rank computes them (a sharded model's forward is a collective), rank 0 logs them."""
    model.eval()
    completions = []
    for prompt in prompts:
        if getattr(tokenizer, "chat_template", None):
            text = chat(tokenizer, [{"role": "user", "content": prompt}], add_generation_prompt=True)
        else:
            text = prompt
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]], device=device)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        completions.append(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    model.train()
    return completions
