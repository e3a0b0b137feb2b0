"""GLOBAL_BATCH_SIZE: the rule (trainer_contract.global_batch), the batches it makes every step take
(trainer_runtime.sampler.RankBatches: the same examples on any number of ranks) and the render's check of
it against the job's processes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.generator.helpers import run_main
from trainer_contract.global_batch import accumulation_problem, accumulation_steps
from trainer_runtime.sampler import RankBatches


@dataclass(frozen=True)
class Settings:
    batch_size: int = 8
    gradient_accumulation_steps: int = 1
    global_batch_size: int = 0


RULES = {
    "off: GRADIENT_ACCUMULATION_STEPS": (Settings(gradient_accumulation_steps=3), 4, 3, None),
    "kept on 2 processes": (Settings(global_batch_size=32), 2, 2, None),
    "kept on 4 processes": (Settings(global_batch_size=32), 4, 1, None),
    "no whole number of passes": (Settings(global_batch_size=32), 3, None,
                                  "GLOBAL_BATCH_SIZE: 32 examples a step is no whole number of passes of BATCH_SIZE 8 x "
                                  "3 processes (24 examples); use a multiple of 24"),
    "fewer than one pass": (Settings(global_batch_size=8), 2, None, "use a multiple of 16"),
    "both set": (Settings(global_batch_size=32, gradient_accumulation_steps=2), 2, None,
                 "GLOBAL_BATCH_SIZE: 32 sets the accumulation itself; remove GRADIENT_ACCUMULATION_STEPS=2"),
}


@pytest.mark.parametrize(("settings", "world", "steps", "problem"), RULES.values(), ids=RULES.keys())
def test_the_accumulation_that_keeps_the_global_batch(settings, world, steps, problem):
    found = accumulation_problem(settings, world)
    if problem is None:
        assert found is None and accumulation_steps(settings, world) == steps
    else:
        assert found is not None and problem in found


def step_blocks(size: int, global_batch: int, world: int, seed: int, epoch: int) -> list[list[int]]:
    """Every step's indices over all ranks (each rank's batch of global_batch / world), in the epoch's order."""
    ranks = [RankBatches(size, global_batch // world, rank, world, seed, True) for rank in range(world)]
    for batches in ranks:
        batches.set_epoch(epoch)
    return [sorted(index for batch in step for index in batch) for step in zip(*ranks, strict=True)]


@given(size=st.integers(1, 200), per_rank=st.integers(1, 6), worlds=st.sampled_from([(1, 2), (2, 4), (1, 4), (3, 6)]),
       seed=st.integers(0, 5), epoch=st.integers(0, 3))
def test_with_the_global_batch_fixed_every_step_takes_the_same_examples_on_any_number_of_ranks(
        size, per_rank, worlds, seed, epoch):
    few, many = worlds
    global_batch = per_rank * many  # a whole number of passes on both
    fewer, more = (step_blocks(size, global_batch, world, seed, epoch) for world in (few, many))
    assert len(fewer) == len(more) == -(-size // global_batch)
    assert fewer[:-1] == more[:-1]  # the last step's repeats (the shares' padding) may differ
    every = set(range(size))
    assert set(fewer[-1]) | {i for step in fewer[:-1] for i in step} == every
    assert set(more[-1]) | {i for step in more[:-1] for i in step} == every


def test_the_render_refuses_a_global_batch_the_jobs_processes_cannot_keep():
    job = [arg for item in ("entrypoint.module=worker.sft", "replicas=2", "local_device_count=2",
                            "config_map.BATCH_SIZE=4") for arg in ("--set", item)]
    refused = run_main(*job, "--set", "config_map.GLOBAL_BATCH_SIZE=24")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert ("config_map.GLOBAL_BATCH_SIZE: 24 examples a step is no whole number of passes of BATCH_SIZE 4 x 4 "
            "processes (16 examples); use a multiple of 16 (replicas 2 x 2 processes per pod)") in refused.stderr
    assert run_main(*job, "--set", "config_map.GLOBAL_BATCH_SIZE=32").exit_code == 0
