"""Evaluation at each epoch's end: every process scores its share of the held-out texts; the counts (a confusion
matrix and the summed loss) are added up across the gang, so the accuracy, macro F1 and loss are those of the
whole split at any world size."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer_runtime.precision import Precision
from trainer_runtime.pretrained.batches import collate


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


@torch.no_grad()
def evaluate(model: torch.nn.Module, examples: list[dict[str, Any]], num_labels: int, batch_size: int, pad_id: int,
             precision: Precision, device: torch.device, rank: int, world_size: int) -> dict[str, float]:
    model.eval()
    confusion = torch.zeros(num_labels * num_labels, dtype=torch.float64, device=device)
    loss_sum = torch.zeros(1, dtype=torch.float64, device=device)
    mine = examples[rank::world_size]
    for start in range(0, len(mine), batch_size):
        batch = {key: value.to(device) for key, value in collate(mine[start:start + batch_size], pad_id).items()
                 if key != "index"}
        labels = batch.pop("labels")
        with precision.autocast():
            logits = model(**batch).logits.float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").double()
        confusion += torch.bincount(labels * num_labels + logits.argmax(-1), minlength=num_labels ** 2).double()
    if world_size > 1:
        dist.all_reduce(confusion)
        dist.all_reduce(loss_sum)
    model.train()
    return scores(confusion.view(num_labels, num_labels).cpu(), float(loss_sum.item()))
