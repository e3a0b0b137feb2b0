"""METRIC_FOR_BEST_MODEL's rule (trainer_runtime/pretrained/best_checkpoint.py): which evaluation is the best so far
(lower loss and perplexity, higher accuracy and f1; a tie keeps the earlier), and the store keeping its checkpoint
beside the newest ones."""

import pytest

from trainer_contract import checkpoint_layout as layout
from trainer_runtime.pretrained.best_checkpoint import BestCheckpoint


@pytest.mark.parametrize("metric, values, improved, best_at", [
    ("loss", [0.9, 0.5, 0.7, 0.5], [True, True, False, False], 1),  # lower is better; a tie keeps the earlier
    ("perplexity", [3.0, 2.5, 2.4], [True, True, True], 2),
    ("accuracy", [50.0, 90.0, 90.0, 80.0], [True, True, False, False], 1),  # higher is better
    ("f1", [10.0, 5.0], [True, False], 0),
])
def test_the_best_evaluation_so_far_is_the_lowest_loss_or_the_highest_score_the_earlier_on_a_tie(metric, values,
                                                                                                  improved, best_at):
    best = BestCheckpoint(metric)
    offered = [best.offer({metric: value, "other": 1.0}, step, f"step-{step}") for step, value in enumerate(values)]
    assert offered == improved
    assert best.best["step"] == best_at and best.best["value"] == values[best_at]
    assert best.best["scores"] == {metric: values[best_at], "other": 1.0}
    assert best.kept() == {f"step-{best_at}"}


def test_without_a_metric_nothing_is_best_and_nothing_is_kept_for_it():
    best = BestCheckpoint("none")
    assert not best.offer({"loss": 0.1}, 1, "step-1") and best.best is None and best.kept() == set()


def test_a_record_of_another_metric_is_replaced_by_the_first_evaluation_of_this_one():
    """A run resumed with another METRIC_FOR_BEST_MODEL: the recorded best was by another measure."""
    best = BestCheckpoint("accuracy", {"checkpoint": "step-1", "step": 1, "metric": "loss", "value": 0.1,
                                       "scores": {}})
    assert best.offer({"accuracy": 1.0, "loss": 9.0}, 2, "step-2") and best.kept() == {"step-2"}


def test_pruning_keeps_the_newest_and_the_ones_named_beside_them(tmp_path):
    for step in (2, 4, 6, 8):
        (tmp_path / layout.step_checkpoint_name(step)).write_bytes(b"x")
    layout.prune(tmp_path, 1, layout.OPTIMIZER_STEP, frozenset({layout.step_checkpoint_name(4)}))
    assert sorted(path.name for path in tmp_path.iterdir()) == [layout.step_checkpoint_name(4),
                                                                layout.step_checkpoint_name(8)]
