"""Evaluation at each epoch's end (trainer_runtime.sharded_evaluation): every process scores its share of the
held-out texts; the counts (a confusion matrix and the summed loss) are added up across the gang, so the accuracy,
macro F1 and loss are those of the whole split at any world size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from trainer_runtime.precision import Precision
from trainer_runtime.pretrained.batches import collate
from trainer_runtime.sharded_evaluation import evaluating, gang_sum, rank_batches


def scores(confusion: torch.Tensor, loss_sum: float) -> dict[str, float]:
    """``confusion[true, predicted]`` counts: accuracy and macro F1 in percent, mean loss."""
    total = float(confusion.sum())
    hits = confusion.diag().double()
    precision = hits / confusion.sum(0).clamp(min=1)
    recall = hits / confusion.sum(1).clamp(min=1)
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall).clamp(min=1e-12), 0.0)
    present = confusion.sum(1) > 0  # classes the split has
    return {"accuracy": 100.0 * float(hits.sum()) / max(total, 1.0),
            "f1": 100.0 * float(f1[present].mean()) if present.any() else 0.0,
            "loss": loss_sum / max(total, 1.0)}


def evaluate(model: torch.nn.Module, examples: Sequence[dict[str, Any]], num_labels: int, batch_size: int, pad_id: int,
             precision: Precision, device: torch.device, rank: int, world_size: int) -> dict[str, float]:
    counts = torch.zeros(num_labels * num_labels + 1, dtype=torch.float64, device=device)  # confusion, loss sum
    with evaluating(model):
        for (part,), counted in rank_batches(batch_size, rank, world_size, examples):
            batch = {key: value.to(device) for key, value in collate(part, pad_id).items() if key != "index"}
            labels = batch.pop("labels")
            with precision.autocast():
                logits = model(**batch).logits.float()
            if counted:
                counts[:-1] += torch.bincount(labels * num_labels + logits.argmax(-1),
                                              minlength=num_labels ** 2).double()
                counts[-1] += F.cross_entropy(logits, labels, reduction="sum").double()
    counts = gang_sum(counts, world_size).cpu()
    return scores(counts[:-1].view(num_labels, num_labels), float(counts[-1]))
