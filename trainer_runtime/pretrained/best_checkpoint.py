"""The best checkpoint by METRIC_FOR_BEST_MODEL (TRL's metric_for_best_model with load_best_model_at_end): at every
evaluation (each epoch's end, and every EVAL_STEPS steps) the loop offers the scores of the checkpoint it then
writes; the best so far travels in every checkpoint (a resume, also from the bucket, knows it), the store keeps its
file beside the newest KEEP_CHECKPOINTS, and the run exports it at the end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NONE = "none"  # METRIC_FOR_BEST_MODEL's word for no metric: the last model is exported
# the metrics a lower value of is better (transformers': greater is better unless the name ends with "loss")
LOWER_IS_BETTER = frozenset({"loss", "perplexity"})


@dataclass
class BestCheckpoint:
    """``metric``: the score compared (NONE: nothing kept for being best); ``best``: the best so far, as a checkpoint
    records it ({checkpoint, step, metric, value, scores}), or None."""

    metric: str
    best: dict[str, Any] | None = None

    @property
    def tracking(self) -> bool:
        return self.metric != NONE

    def offer(self, scores: dict[str, float], step: int, checkpoint: str) -> bool:
        """Whether ``scores`` (of the model at ``step``, about to be written as ``checkpoint``) are the best so far:
        then they are, ties going to the earlier one."""
        if not self.tracking:
            return False
        value = float(scores[self.metric])
        if self.best is not None and self.best.get("metric") == self.metric:
            kept = float(self.best["value"])
            if not (value < kept if self.metric in LOWER_IS_BETTER else value > kept):
                return False
        self.best = {"checkpoint": checkpoint, "step": step, "metric": self.metric, "value": value,
                     "scores": {key: float(score) for key, score in scores.items()}}
        return True

    def kept(self) -> set[str]:
        """The checkpoint the store keeps beside the newest ones."""
        return {self.best["checkpoint"]} if self.tracking and self.best is not None else set()
