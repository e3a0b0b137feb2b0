"""python -m worker.qa under the launcher with two processes (gloo, CPU), FSDP and DDP: it learns the tests'
questions, exports a model that loads with from_pretrained and answers as the trained one did, resumes a killed
run exactly, and refuses to resume with another tokenizer."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from testbed.qa_data import make_model, make_squad
from tests.checkpoint_cadence import killed_after_checkpoints_by_time_then_resumed
from tests.exports import same_weights
from tests.mnist.launch import fault_env, resumed_with_a_changed_model, run_workload, snapshot
from trainer_contract import gang_ledger

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")
pytest.importorskip("lightning")

EXPORT = "bert_squad_trained"  # where the run exports, in OUTPUT_DIR
SETTINGS = {"EPOCHS": "3", "BATCH_SIZE": "16", "LEARNING_RATE": "0.003", "MAX_SEQ_LENGTH": "64", "LOG_INTERVAL": "1",
            "CHECKPOINT_EVERY_STEPS": "5", "USAGE_LOG_SECONDS": "0.5", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("qa")
    return make_model(root / "model"), make_squad(root / "data", train=256, validation=64)


@pytest.fixture(scope="module")
def whole_runs(world, tmp_path_factory):
    """The uninterrupted run of each strategy (made once, on first use), its output directory and its result: what
    an interrupted one must end as, and what test_it_learns checks (one run each, not two of the same)."""
    runs: dict[str, tuple] = {}

    def run(strategy: str):
        if strategy not in runs:
            output = tmp_path_factory.mktemp(f"whole-{strategy}")
            result = run_qa(*world, output, {"STRATEGY": strategy})
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            runs[strategy] = (output, result)
        return runs[strategy]

    return run


@pytest.fixture(scope="module")
def whole(whole_runs):
    """The uninterrupted run's output directory, by strategy."""
    return lambda strategy: whole_runs(strategy)[0]


def run_qa(model, data, output, extra=None, timeout=300) -> subprocess.CompletedProcess:
    return run_workload("worker.qa", SETTINGS, model, data, output, extra, timeout)


def logits(model, data, max_length=64):
    """The start and end logits of ``model`` (a directory or a module) on the evaluation questions."""
    import torch

    from worker.qa import features, squad

    tokenizer = transformers.AutoTokenizer.from_pretrained(model if not hasattr(model, "forward") else data[1])
    loaded = model if hasattr(model, "forward") else transformers.AutoModelForQuestionAnswering.from_pretrained(model)
    questions = squad.load_split(data[0], "validation")
    windows = features.featurize(tokenizer, questions, max_length, 16)
    loaded.eval()
    with torch.no_grad():
        outputs = [loaded(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types]))
                   for ids, types in zip(windows.input_ids, windows.token_type_ids, strict=True)]
    starts = [output.start_logits[0].numpy() for output in outputs]
    ends = [output.end_logits[0].numpy() for output in outputs]
    return questions, windows, starts, ends


def untrained_f1(model, data) -> float:
    from worker.qa import features, squad_scores

    questions, windows, starts, ends = logits(model, (data, model))
    predicted = features.answers(questions, windows, starts, ends, 30)
    return squad_scores.score(predicted, {item.id: item.answers for item in questions})["f1"]


@pytest.mark.parametrize("strategy", ["fsdp", "ddp"])
def test_it_learns_exports_and_the_export_answers_as_the_trained_model(world, whole_runs, tmp_path, strategy):
    import torch

    model, data = world
    out, result = whole_runs(strategy)  # the module's uninterrupted run: read here, never written to
    summary = json.loads((out / "summary.json").read_text())
    baseline = untrained_f1(model, data)
    assert summary["f1"] >= baseline + 50 and summary["exact_match"] >= 80, (summary, baseline)
    assert "Rank 0: epoch 3/3, step 24/24" in result.stdout and "tokens/s" in result.stdout
    exported = out / "bert_squad_trained"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {path.name for path in exported.iterdir()}

    # from_pretrained(export) gives the logits of the trained weights (the last checkpoint's, step 24: under fsdp a
    # directory of each rank's shards with the runtime's manifest, read whole here with torch.distributed.checkpoint's
    # converter; under ddp the runtime's verified file)
    from trainer_runtime.checkpoints import sharded, single_file

    checkpoint = out / "checkpoints" / "step-00000024.ckpt"
    assert checkpoint.is_dir() == (strategy == "fsdp")
    if checkpoint.is_dir():
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        assert sharded.verify(checkpoint)["world_size"] == 2  # the record, in the manifest of digests
        assert {"loops", "lr_schedulers"} <= set(sharded.read_extra(checkpoint))  # Lightning's own, beside
        dcp_to_torch_save(checkpoint, tmp_path / "whole.pt")
        weights = torch.load(tmp_path / "whole.pt", weights_only=False)["state_dict"]  # trusted: written by this test
    else:
        weights = single_file.read_payload(checkpoint)["state_dict"]
    trained = transformers.AutoModelForQuestionAnswering.from_pretrained(model)
    trained.load_state_dict({key.removeprefix("model."): value for key, value in weights.items()})
    questions, windows, export_starts, export_ends = logits(exported, (data, exported))
    _, _, trained_starts, trained_ends = logits(trained, (data, exported))
    for ours, theirs in zip(export_starts + export_ends, trained_starts + trained_ends, strict=True):
        assert (ours == theirs).all()
    # and the answers the run wrote (SQuAD's predictions.json) are the export's
    from worker.qa import features

    predictions = json.loads((out / "predictions.json").read_text())
    assert predictions == features.answers(questions, windows, export_starts, export_ends, 30)

    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in steps if "loss" in line] == list(range(1, 25))
    assert [line["epoch"] for line in steps if "f1" in line] == [1, 2, 3]
    for rank in (0, 1):
        lines = (out / "logs" / f"usage-rank{rank}.log").read_text().splitlines()
        assert lines and all(f"rank {rank} cpu " in line and " rss " in line for line in lines)
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.parametrize(("strategy", "batch", "checkpoint", "rerun"), [
    ("fsdp", "2.3", 10, True),  # rank 1 dies before batch 3 of epoch 2 (step 11), after the checkpoint of step 10
    ("ddp", "2.3", 10, False),  # rerun: the same for every resumed run, so once
    ("fsdp", "3.1", 16, False),  # before epoch 3's first batch: the checkpoint of epoch 2's end (after its evaluation)
])
def test_a_killed_run_resumes_at_its_checkpoint_and_ends_bit_identical(world, whole, tmp_path, strategy, batch,
                                                                        checkpoint, rerun):
    model, data = world
    fault = fault_env(f"sigkill@batch={batch},rank=1,attempt=0")
    killed = run_qa(model, data, tmp_path / "killed", {"STRATEGY": strategy, **fault})
    assert killed.returncode != 0
    resumed = run_qa(model, data, tmp_path / "killed", {"STRATEGY": strategy, **fault})
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"Rank 0: resuming from step-{checkpoint:08d}.ckpt" in resumed.stdout
    assert f"Rank 0: training from step {checkpoint} of 24" in resumed.stdout

    from safetensors.torch import load_file

    assert same_weights(whole(strategy) / EXPORT, tmp_path / "killed" / EXPORT)
    resumed_weights = load_file(tmp_path / "killed" / "bert_squad_trained" / "model.safetensors")
    lines = [json.loads(line) for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "loss" in line] == list(range(1, 25))  # none twice, none missing
    assert [line["epoch"] for line in lines if "f1" in line] == [1, 2, 3]

    if not rerun:
        return
    # a rerun of the finished run does nothing: its launcher finds it complete, no worker starts, no file changes
    before = snapshot(tmp_path / "killed")
    again = run_qa(model, data, tmp_path / "killed", {"STRATEGY": strategy})
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"launcher: the run in {tmp_path / 'killed'} is already complete (24 steps, exact_match " in again.stderr
    assert "Rank 0:" not in again.stdout and snapshot(tmp_path / "killed") == before
    # killed after its last checkpoint, before its summary: the rerun trains nothing, evaluates and exports again
    (tmp_path / "killed" / "summary.json").unlink()
    again = run_qa(model, data, tmp_path / "killed", {"STRATEGY": strategy})
    assert again.returncode == 0 and "Rank 0: resuming from step-00000024.ckpt" in again.stdout, again.stdout[-3000:]
    assert "loss" not in again.stdout
    exported = load_file(tmp_path / "killed" / "bert_squad_trained" / "model.safetensors")
    assert all((exported[key] == resumed_weights[key]).all() for key in exported)


def test_a_killed_worker_is_restarted_in_place_and_the_run_ends_bit_identical(world, whole, tmp_path):
    """As rendered (restart_in_place, max_restarts): the launcher starts the round again itself, with new workers
    resuming from the checkpoint, and the run ends as an uninterrupted one did; no second launch."""
    model, data = world
    in_place = {"INDEXED_TRAINER_RESTART_IN_PLACE": "true", "INDEXED_TRAINER_MAX_RESTARTS": "1"}
    run = run_qa(model, data, tmp_path / "out", {"STRATEGY": "fsdp", **in_place,
                                                 **fault_env("sigkill@batch=2.3,rank=1,attempt=0")})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # killed after the checkpoint of step 10, published in this round: a fault after progress, not counted
    assert ("launcher: round 1 failed: this pod's worker failed with exit code 137; restarting in place, not counted: "
            "fault after progress (checkpoint step-00000010.ckpt published in this round; 0 of at most 1 restarts "
            "spent)") in run.stderr
    assert "Rank 0: resuming from step-00000010.ckpt" in run.stdout
    assert same_weights(whole("fsdp") / EXPORT, tmp_path / "out" / EXPORT)
    # the node recorded which launcher it was in the round (trainer_runtime.gang.record_attempt, as every program)
    assert (tmp_path / "out" / gang_ledger.DIRECTORY / f"0.{gang_ledger.ATTEMPT}").read_text().startswith("0-")


@pytest.mark.parametrize("strategy", ["fsdp"])
def test_sigterm_checkpoints_the_step_reached_and_the_resumed_run_ends_bit_identical(world, whole, tmp_path,
                                                                                      strategy):
    """A preempted pod (SIGTERM to its launcher, forwarded to the workers) costs at most the step in flight: the
    gang agrees at that step's end, checkpoints it (every rank its shards under FSDP) and exits 143; the next start
    goes on from it and ends as an uninterrupted run did. No mid-epoch cadence: only the stop writes one."""
    model, data = world
    settings = {"STRATEGY": strategy, "CHECKPOINT_EVERY_STEPS": "0"}
    stopped = run_qa(model, data, tmp_path / "out", {**settings, **fault_env("sigterm-pod@batch=2.3,rank=0,attempt=0")})
    assert stopped.returncode == 143, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    # the signal reaches the workers through torchrun while batch 3 of epoch 2 (step 11) or a later one runs
    step = int(re.search(r"Rank 0: stopped on request at step (\d+), checkpointed; exiting 143", stopped.stdout)[1])
    assert 11 <= step < 16, stopped.stdout[-3000:]
    saved = sorted(path.name for path in (tmp_path / "out" / "checkpoints").glob("step-*.ckpt"))
    assert saved == ["step-00000008.ckpt", f"step-{step:08d}.ckpt"]  # epoch 1's end, and the step the stop reached
    resumed = run_qa(model, data, tmp_path / "out", settings)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"Rank 0: resuming from step-{step:08d}.ckpt" in resumed.stdout
    assert same_weights(whole(strategy) / EXPORT, tmp_path / "out" / EXPORT)
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "loss" in line] == list(range(1, 25))


def test_checkpoints_by_time_come_mid_epoch_and_a_run_killed_after_one_resumes_from_it_bit_identical(
        world, whole, tmp_path):
    """CHECKPOINT_EVERY_SECONDS under Lightning and FSDP (every checkpoint a collective of every rank's shards):
    rank 0's clock is agreed on with the stop, in the callback's one all-reduce a step."""
    model, data = world
    every = 0.3  # seconds: every third step or so (a step lasts 0.1 s or more)
    by_time = {"STRATEGY": "fsdp", "CHECKPOINT_EVERY_STEPS": "0", "CHECKPOINT_EVERY_SECONDS": str(every),
               "KEEP_CHECKPOINTS": "100"}
    killed_after_checkpoints_by_time_then_resumed(
        lambda output, settings: run_qa(model, data, output, settings), tmp_path / "out", by_time, every, 8,
        kill_at="2.7", dies_before=15)
    assert same_weights(whole("fsdp") / EXPORT, tmp_path / "out" / EXPORT)
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "loss" in line] == list(range(1, 25))


def test_resuming_with_another_tokenizer_or_batch_size_is_refused_naming_each(world, tmp_path):
    model, data = world
    finished, resumed = resumed_with_a_changed_model(run_qa, model, data, tmp_path, "tokenizer_config.json",
                                                     "model_max_length", 77)
    for said, what in ((finished, f"the finished run in {tmp_path / 'out'}"), (resumed, "checkpoint step-00000008.ckpt")):
        assert f"configuration error: MODEL_DIR: {what} was trained from another tokenizer" in said, said[-3000:]
        assert f"configuration error: BATCH_SIZE: {what} was trained with BATCH_SIZE=16, now 8" in said
        assert "model revision" not in said and "another model " not in said
