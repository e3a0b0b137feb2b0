"""CHECKPOINT_EVERY_SECONDS: every built-in program reads it; only rank 0's clock votes, and the vote rides in the
step's all-reduce. In real MNIST runs (torchrun, gloo, two ranks): 0 checkpoints at epoch ends only;
otherwise checkpoints come mid-epoch at about that cadence and every rank goes on together (under fsdp too, where
each is a collective), and a run killed after one resumes from it, as from a SIGTERM's mid-epoch checkpoint, and
ends bit-identical to the uninterrupted run."""

from __future__ import annotations

import json
import re
import statistics
import time

import pytest
import torch

from tests.checkpoint_cadence import slow_steps
from tests.mnist.launch import kill_tree, recorded_epochs, run, start, torchrun_command, worker_env
from trainer_contract.config_reading import load_config
from trainer_contract.program_settings import FinetuneConfig, QaConfig, SftConfig, TrainConfig
from trainer_contract.settings import ConfigError
from trainer_runtime.checkpoints.clock import CheckpointClock
from trainer_runtime.gradsync import FlatGradients, StepAgreement

EVERY = 0.25  # seconds: a few checkpoints in each epoch
STEPS = 64  # 1,024 training images, 2 ranks x 8
SLOW_STEPS = slow_steps(0.02)  # an epoch lasts over a second on any machine
# ranks that disagreed on a checkpoint would wait in different collectives: they fail within COLLECTIVE_TIMEOUT
SETTINGS = dict(EPOCHS=2, BATCH_SIZE=8, LOG_INTERVAL=1, OMP_NUM_THREADS=1, TENSORBOARD="false",
                FAULT_INJECT=SLOW_STEPS, COLLECTIVE_TIMEOUT=60)
# rank 0's line once a checkpoint is written, with the seconds since its save began
WRITTEN = re.compile(r"Rank 0: checkpoint ckpt-e(\d+)-s(\d+)\.(?:pt|dcp) written \((\d+\.\d+) s")


def timed_run(small_dir, out, **settings) -> list[tuple[float, str]]:
    """A run to its end, each line of its output with when it arrived (seconds from the start)."""
    process = start(torchrun_command(2), worker_env(small_dir, out, **{**SETTINGS, **settings}))
    began, lines = time.monotonic(), []
    try:
        for line in process.stdout:
            lines.append((time.monotonic() - began, line))
        assert process.wait(timeout=60) == 0, "".join(line for _, line in lines)[-3000:]
    finally:
        kill_tree(process)
    return lines


def written(lines) -> list[tuple[float, int, int]]:
    """(when its save began, epoch, step) of each checkpoint rank 0 wrote."""
    return [(at - float(match[3]), int(match[1]), int(match[2])) for at, line in lines
            if (match := WRITTEN.search(line))]


def assert_mid_epoch_at_the_cadence(lines) -> None:
    saves = written(lines)
    mid_epoch = [step for _, _, step in saves if step]
    assert len(mid_epoch) >= 2 and all(0 < step < STEPS for step in mid_epoch), saves
    # each measured from the save before (an epoch's end restarts the clock too)
    gaps = [later[0] - earlier[0] for earlier, later in zip(saves, saves[1:], strict=False) if later[2]]
    assert min(gaps) > EVERY - 0.05, gaps
    assert statistics.median(gaps) < EVERY + 1.0, gaps  # a few steps late at most, on a loaded machine
    output = "".join(line for _, line in lines)
    assert "Rank 0: training completed." in output and "Rank 1: training completed." in output  # nobody hung


@pytest.mark.parametrize(("program", "default"), [
    (TrainConfig, 30.0), (QaConfig, 300.0), (FinetuneConfig, 300.0), (SftConfig, 300.0)])
def test_every_built_in_program_reads_the_setting_and_refuses_a_negative_one(program, default):
    assert program().checkpoint_every_seconds == default
    assert load_config({"CHECKPOINT_EVERY_SECONDS": "0.5"}, config_class=program).checkpoint_every_seconds == 0.5
    with pytest.raises(ConfigError) as caught:
        load_config({"CHECKPOINT_EVERY_SECONDS": "-1"}, config_class=program)
    assert caught.value.problems == ["CHECKPOINT_EVERY_SECONDS: '-1' must be 0 or a positive number"]


@pytest.mark.parametrize(("every", "rank_0", "waited", "votes"), [
    (0.05, True, 0.0, False),  # not yet
    (0.05, True, 0.06, True),
    (0.05, False, 0.06, False),  # only rank 0's clock votes
    (0.0, True, 0.06, False),  # 0: off
])
def test_only_rank_0_votes_once_the_interval_has_passed(every, rank_0, waited, votes):
    clock = CheckpointClock(every, votes=rank_0)
    time.sleep(waited)
    assert clock.due() == votes
    clock.restart()
    assert not clock.due()


def test_the_vote_rides_in_the_flat_all_reduce_beside_the_samples_and_the_stop():
    gradients = FlatGradients(torch.nn.Linear(3, 2).parameters(), world_size=1)
    assert gradients.synchronize(4, False, True) == StepAgreement(4, stop=False, checkpoint=True)
    assert gradients.synchronize(4, True) == StepAgreement(4, stop=True, checkpoint=False)


@pytest.fixture(scope="module")
def uninterrupted(small_dir, tmp_path_factory):
    """CHECKPOINT_EVERY_SECONDS=0: (OUTPUT_DIR, timed lines) of the run an interrupted one must end as."""
    out = tmp_path_factory.mktemp("uninterrupted")
    return out, timed_run(small_dir, out, CHECKPOINT_EVERY_SECONDS=0)


@pytest.mark.slow
def test_0_checkpoints_at_epoch_ends_only(uninterrupted):
    _, lines = uninterrupted
    assert [(epoch, step) for _, epoch, step in written(lines)] == [(1, 0), (2, 0)]


@pytest.mark.slow
def test_a_run_killed_after_a_checkpoint_by_time_resumes_from_it_and_ends_as_the_uninterrupted_run(
        uninterrupted, small_dir, tmp_path):
    out = tmp_path / "out"
    # the pod dies as soon as the second checkpoint of the first start is on disk: both mid-epoch
    killed = run(torchrun_command(2), worker_env(small_dir, out, **{
        **SETTINGS, "CHECKPOINT_EVERY_SECONDS": EVERY,
        "FAULT_INJECT": f"{SLOW_STEPS}; sigkill-pod@written=2,rank=0,attempt=0"}))
    assert killed.returncode != 0
    _, epoch, step = written([(0.0, line) for line in killed.stdout.splitlines()])[-1]
    assert step, killed.stdout[-3000:]

    lines = timed_run(small_dir, out, CHECKPOINT_EVERY_SECONDS=EVERY)
    resumed = "".join(line for _, line in lines)
    assert f"resuming from ckpt-e{epoch:04d}-s{step:06d}.pt" in resumed
    # the steps before the checkpoint are not trained again
    assert f"Rank 0: epoch: {epoch + 1}/2, batch: {step + 1}/{STEPS}" in resumed
    assert f"Rank 0: epoch: {epoch + 1}/2, batch: {step}/{STEPS}" not in resumed
    assert_mid_epoch_at_the_cadence(lines)
    assert recorded_epochs(out) == [1, 2]
    # bit-identical: checkpoints change no step, and the resumed one takes the very steps the uninterrupted took
    reference = uninterrupted[0]
    whole = torch.load(reference / "model.pt", weights_only=True)
    ended = torch.load(out / "model.pt", weights_only=True)
    assert all(torch.equal(whole[name], ended[name]) for name in whole)
    # the resumed epoch reports the uninterrupted one's loss: the checkpoint carried its running sums
    assert losses(out) == pytest.approx(losses(reference), rel=1e-9)


@pytest.mark.slow
def test_under_fsdp_every_rank_writes_its_shards_in_the_same_step_and_goes_on(small_dir, tmp_path):
    out = tmp_path / "out"
    lines = timed_run(small_dir, out, STRATEGY="fsdp", CHECKPOINT_EVERY_SECONDS=EVERY, EPOCHS=1)
    assert_mid_epoch_at_the_cadence(lines)
    assert all(path.name.endswith(".dcp") for path in (out / "checkpoints").iterdir() if path.name.startswith("ckpt"))
    assert recorded_epochs(out) == [1]


def losses(out) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
