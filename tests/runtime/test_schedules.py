"""LR_SCHEDULER_TYPE means what transformers' get_scheduler (and so TRL's SFTTrainer) means by each name: the
learning rate of every optimizer step, warm-up included, equals theirs (trainer_runtime/pretrained/schedules.py)."""

import pytest
import torch

from trainer_contract.program_settings import SCHEDULES
from trainer_runtime.pretrained.schedules import factor, schedule_for


def rates(make, steps: int) -> list[float]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    schedule = make(optimizer)
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return seen


@pytest.mark.parametrize("kind", SCHEDULES)
@pytest.mark.parametrize("warmup, total", [(0, 20), (3, 20), (5, 5), (0, 1), (7, 30)])
def test_every_step_has_the_rate_transformers_gives_that_name(kind, warmup, total):
    transformers = pytest.importorskip("transformers")
    theirs = rates(lambda optimizer: transformers.get_scheduler(kind, optimizer, num_warmup_steps=warmup,
                                                                num_training_steps=total), total)
    ours = rates(lambda optimizer: schedule_for(optimizer, kind, warmup, total), total)
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_the_shapes_without_a_reference():
    """Warm-up from 0, the peak after it, the end of a decay at 0, cosine's midpoint at half the peak."""
    assert [factor("linear", step, 4, 12) for step in (0, 2, 4, 12)] == [0.0, 0.5, 1.0, 0.0]
    assert factor("cosine", 8, 4, 12) == pytest.approx(0.5)
    assert factor("constant", 0, 4, 12) == 1.0 and factor("constant_with_warmup", 1, 4, 12) == 0.25
    with pytest.raises(ValueError, match="no schedule 'step'"):
        factor("step", 0, 0, 1)
