"""python -m worker.finetune (seed 004) under the launcher with two processes (gloo, CPU), DDP and bf16 autocast:
it learns the tests' labelled texts (CSV and JSON lines, labels by name), exports a model that loads with
from_pretrained and classifies as the trained one did, resumes a killed run bit-identically (dropout on: every
step reseeds it), checkpoints and stops on SIGTERM, and refuses to resume with another model or batch size."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import pytest

from testbed.qa_data import make_model
from testbed.text_data import make_texts
from tests.checkpoint_cadence import killed_after_checkpoints_by_time_then_resumed
from tests.exports import same_weights
from tests.mnist.launch import (
    as_node,
    fault_env,
    free_port,
    resumed_with_a_changed_model,
    run,
    run_workload,
    snapshot,
    workload_env,
)
from trainer_contract import exit_codes

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")

# 512 texts, 2 processes x 16: 16 steps per epoch, 48 in all; checkpoints by steps alone, unless a test says
SETTINGS = {"EPOCHS": "3", "BATCH_SIZE": "16", "LEARNING_RATE": "0.005", "PRECISION": "bf16", "LOG_INTERVAL": "1",
            "CHECKPOINT_EVERY_STEPS": "5", "CHECKPOINT_EVERY_SECONDS": "0", "USAGE_LOG_SECONDS": "0.5",
            "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    return make_model(root / "model", dropout=0.1), make_texts(root / "data", train=512, validation=64)


def run_finetune(model, data, output, extra=None, timeout=300) -> subprocess.CompletedProcess:
    return run_workload("worker.finetune", SETTINGS, model, data, output, extra, timeout)


def logits(model, data):
    """``model``'s logits (a directory, or a module) on the validation texts, one text at a time."""
    import torch

    tokenizer = transformers.AutoTokenizer.from_pretrained(data[1])
    loaded = model if hasattr(model, "forward") else \
        transformers.AutoModelForSequenceClassification.from_pretrained(model)
    texts = [json.loads(line)["text"] for line in (data[0] / "validation.jsonl").read_text().splitlines()]
    loaded.eval()
    with torch.no_grad():
        return torch.cat([loaded(**tokenizer(text, return_tensors="pt")).logits for text in texts])


@pytest.fixture(scope="module")
def whole_run(world, tmp_path_factory):
    """The uninterrupted run, its output directory and its result: what an interrupted one must end as, and what
    test_it_learns checks (one run, not two of the same)."""
    output = tmp_path_factory.mktemp("whole")
    result = run_finetune(*world, output)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return output, result


@pytest.fixture(scope="module")
def whole(whole_run):
    """The uninterrupted run's output directory."""
    return whole_run[0]


def test_it_learns_and_the_export_classifies_as_the_trained_model(world, whole_run):
    import torch

    model, data = world
    out, result = whole_run  # the module's uninterrupted run: read here, never written to
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy"] >= 95 and summary["f1"] >= 95, summary  # two balanced classes: chance is 50
    assert "Rank 0: epoch 3/3, step 48/48" in result.stdout and "tokens/s" in result.stdout
    assert "Rank 0: new weights for the task: bert.pooler.dense.bias, bert.pooler.dense.weight, classifier.bias" \
        in result.stdout
    exported = out / "bert_classifier_trained"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {path.name for path in exported.iterdir()}
    loaded = transformers.AutoConfig.from_pretrained(exported)
    assert loaded.id2label == {0: "negative", 1: "positive"}

    # from_pretrained(export) gives the logits of the last checkpoint's weights, and they classify as scored
    from trainer_runtime.checkpoints import single_file

    checkpoint = single_file.read_payload(out / "checkpoints" / "step-00000048.ckpt")
    trained = transformers.AutoModelForSequenceClassification.from_pretrained(exported)
    trained.load_state_dict(checkpoint["model"])
    assert torch.equal(logits(exported, (data, exported)), logits(trained, (data, exported)))
    from testbed.text_data import LABELS

    truth = [LABELS.index(json.loads(line)["label"]) for line in (data / "validation.jsonl").read_text().splitlines()]
    predicted = logits(exported, (data, exported)).argmax(-1).tolist()
    assert sum(p == t for p, t in zip(predicted, truth, strict=True)) >= 0.95 * len(truth)

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in records if "loss" in line and "accuracy" not in line] == list(range(1, 49))
    assert [line["epoch"] for line in records if "accuracy" in line] == [1, 2, 3]
    for rank in (0, 1):
        lines = (out / "logs" / f"usage-rank{rank}.log").read_text().splitlines()
        assert lines and all(f"rank {rank} cpu " in line and " rss " in line for line in lines)
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_max_steps_ends_the_run_inside_an_epoch_where_the_cosine_schedule_reaches_0(world, tmp_path):
    """MAX_STEPS=20 of 16-step epochs (TRL's max_steps: it decides the length instead of EPOCHS): the run trains 20
    steps, ends the second epoch there with its evaluation, checkpoint and export, and LR_SCHEDULER_TYPE=cosine
    follows transformers' cosine down to 0 at step 20."""
    from trainer_runtime.pretrained.schedules import factor

    model, data = world
    result = run_finetune(model, data, tmp_path / "out", {"MAX_STEPS": "20", "LR_SCHEDULER_TYPE": "cosine",
                                                          "WARMUP_STEPS": "4"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    trained = [line for line in records if "learning_rate" in line]
    assert [line["step"] for line in trained] == list(range(1, 21))
    # the rate each step left for the next one, as the schedule gives it (0.005 peak)
    assert [line["learning_rate"] for line in trained] == pytest.approx(
        [0.005 * factor("cosine", step, 4, 20) for step in range(1, 21)], abs=1e-12)
    assert trained[-1]["learning_rate"] == pytest.approx(0.0, abs=1e-12)
    assert [(line["epoch"], line["step"]) for line in records if "accuracy" in line] == [(1, 16), (2, 20)]
    assert "Rank 0: epoch 2/2, step 20/20" in result.stdout
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["step"] == 20
    assert (tmp_path / "out" / "checkpoints" / "step-00000020.ckpt").is_file()


def test_eval_steps_evaluate_within_the_epoch_and_the_best_checkpoint_by_a_metric_is_kept_and_exported(world,
                                                                                                       tmp_path):
    """EVAL_STEPS=3 (TRL's eval_strategy=steps): an evaluation record, and a checkpoint, every 3 steps; with
    METRIC_FOR_BEST_MODEL=loss (load_best_model_at_end) the checkpoint of the lowest evaluation loss is kept beside
    the newest one (KEEP_CHECKPOINTS=1) and its weights are what the run exports, its scores summary.json's."""
    import torch
    from safetensors.torch import load_file

    from trainer_runtime.checkpoints import single_file

    model, data = world
    # a rate that overshoots: the loss falls, then rises again before the run's end
    result = run_finetune(model, data, tmp_path / "out", {
        "MAX_STEPS": "9", "EVAL_STEPS": "3", "METRIC_FOR_BEST_MODEL": "loss", "KEEP_CHECKPOINTS": "1",
        "CHECKPOINT_EVERY_STEPS": "0", "LEARNING_RATE": "0.05", "LR_SCHEDULER_TYPE": "constant"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    evaluated = [(line["step"], line["loss"]) for line in records if "accuracy" in line]
    assert [step for step, _ in evaluated] == [3, 6, 9]
    assert "Rank 0: epoch 1, step 3, evaluation: accuracy " in result.stdout
    best_step = min(evaluated, key=lambda record: record[1])[0]  # the first of the lowest
    assert best_step != 9, evaluated  # the case this test is for: the best is not the last
    best = f"step-{best_step:08d}.ckpt"
    kept = sorted(path.name for path in (tmp_path / "out" / "checkpoints").iterdir())
    assert kept == sorted({best, "step-00000009.ckpt"})
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["best_checkpoint"]["checkpoint"] == best and summary["step"] == 9
    assert summary["loss"] == pytest.approx(dict(evaluated)[best_step], abs=1e-4)
    assert f"Rank 0: exporting the best checkpoint by loss, {best} " in result.stdout
    exported = load_file(tmp_path / "out" / "bert_classifier_trained" / "model.safetensors")
    trained = single_file.read_payload(tmp_path / "out" / "checkpoints" / best)["model"]
    shared = sorted(set(exported) & set(trained))
    assert len(shared) > 10 and all(torch.equal(exported[key], trained[key].to(exported[key].dtype))
                                    for key in shared)


def test_resume_false_sets_the_earlier_run_aside_whole_and_the_new_run_keeps_its_own(world, whole, tmp_path):
    """RESUME=false in an OUTPUT_DIR holding a finished run of 48 steps: that run moves, file for file, to
    previous-runs/ before anything is written; the new run's checkpoint is not pruned for the old run's higher step,
    its metrics.jsonl and summary are its own (as the MNIST worker's, trainer_runtime.previous_runs)."""
    model, data = world
    out = shutil.copytree(whole, tmp_path / "out")

    def files(root):
        return sorted(str(path.relative_to(root)) for path in root.rglob("*")
                      if path.is_file() and path.relative_to(root).parts[0] not in ("logs", ".gang", "previous-runs",
                                                                                     "token-cache"))

    before = files(out)
    fresh = run_finetune(model, data, out, {"EPOCHS": "1", "RESUME": "false", "KEEP_CHECKPOINTS": "1"})
    assert fresh.returncode == 0, fresh.stdout[-3000:]
    (kept,) = (out / "previous-runs").iterdir()
    assert f"Rank 0: RESUME=false: the run that was in {out} is kept, whole, in {kept}" in fresh.stdout
    assert files(kept) == before and "checkpoints/step-00000048.ckpt" in before
    assert not (kept / "token-cache").exists()  # the token cache stays: keyed, it is still valid for its settings
    assert [path.name for path in (out / "checkpoints").iterdir()] == ["step-00000016.ckpt"]
    assert json.loads((out / "summary.json").read_text())["step"] == 16
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in records if "accuracy" not in line] == list(range(1, 17))


def test_a_killed_run_resumes_at_its_checkpoint_and_ends_bit_identical(world, whole, tmp_path):
    from safetensors.torch import load_file

    model, data = world
    fault = fault_env("sigkill@batch=2.8,rank=1,attempt=0")  # before step 24: mid-epoch, after the checkpoint of 20
    killed = run_finetune(model, data, tmp_path / "killed", fault)
    assert killed.returncode != 0
    resumed = run_finetune(model, data, tmp_path / "killed", fault)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "Rank 0: resuming from step-00000020.ckpt" in resumed.stdout
    assert "Rank 0: training from step 20 of 48" in resumed.stdout
    # the texts were tokenized once, by the killed run's rank 0: the restart reads the token cache
    assert "Rank 0: tokenized 512 training and 64 evaluation examples" in killed.stdout, killed.stdout[-3000:]
    assert "Rank 0: the tokenized data is read from " in resumed.stdout, resumed.stdout[-3000:]

    whole_weights = load_file(whole / "bert_classifier_trained" / "model.safetensors")
    resumed_weights = load_file(tmp_path / "killed" / "bert_classifier_trained" / "model.safetensors")
    assert whole_weights.keys() == resumed_weights.keys()
    assert all(torch_equal(whole_weights[key], resumed_weights[key]) for key in whole_weights)
    records = [json.loads(line) for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in records if "accuracy" not in line] == list(range(1, 49))  # none twice or lost
    assert [line["epoch"] for line in records if "accuracy" in line] == [1, 2, 3]

    again = run_finetune(model, data, tmp_path / "killed")  # the finished run: nothing to do, no worker started
    assert again.returncode == 0 and f"launcher: the run in {tmp_path / 'killed'} is already complete (48 steps, f1 " \
        in again.stderr, again.stderr[-3000:]
    assert "Rank 0:" not in again.stdout
    (tmp_path / "killed" / "summary.json").unlink()  # killed after its last checkpoint, before its summary
    again = run_finetune(model, data, tmp_path / "killed")
    assert again.returncode == 0 and "Rank 0: resuming from step-00000048.ckpt" in again.stdout
    assert "loss 0." not in again.stdout.replace("loss 0.0", "")  # no training line, only the evaluation's


def test_a_pod_recreated_after_its_gang_finished_exits_at_once_and_another_setting_is_refused(world, whole, tmp_path):
    """Pod 1 recreated after its gang finished (evicted as it left): alone, its rendezvous would wait the join timeout
    for peers that will never come, and then fail a finished run. Its launcher reads the finished run (summary.json
    and its record) and exits 0 at once, changing no file; asked for another setting, 78 naming it, before any
    rendezvous, as the MNIST worker's does."""
    model, data = world
    out = shutil.copytree(whole, tmp_path / "out")
    before = snapshot(out)
    env = workload_env(SETTINGS, model, data, out)
    started = time.monotonic()
    again = run(as_node(1, 2, free_port(), "worker.finetune"), env, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert time.monotonic() - started < 30
    assert f"launcher: the run in {out} is already complete (48 steps, f1 " in again.stderr
    assert snapshot(out) == before
    changed = run(as_node(1, 2, free_port(), "worker.finetune"), {**env, "LEARNING_RATE": "0.01"}, timeout=120)
    assert changed.returncode == exit_codes.BAD_CONFIG, changed.stderr[-3000:]
    assert f"LEARNING_RATE: the finished run in {out} was trained with LEARNING_RATE=0.005, now 0.01" in changed.stderr
    assert snapshot(out) == before
    # the program started without the launcher (plain torchrun, python -m): its shell finds the run the same way
    alone = run([sys.executable, "-m", "worker.finetune"], env, timeout=120)
    assert alone.returncode == 0, alone.stdout[-3000:] + alone.stderr[-3000:]
    assert f"Rank 0: the run in {out} is already complete (48 steps, f1 " in alone.stdout
    assert snapshot(out) == before


def test_checkpoints_by_time_come_mid_epoch_and_a_run_killed_after_one_resumes_from_it_bit_identical(
        world, whole, tmp_path):
    """CHECKPOINT_EVERY_SECONDS: rank 0's clock, agreed beside the gradients, checkpoints every rank together."""
    model, data = world
    every = 0.3  # seconds: every third step or so (a step lasts 0.1 s or more)
    by_time = {"CHECKPOINT_EVERY_STEPS": "0", "CHECKPOINT_EVERY_SECONDS": str(every), "KEEP_CHECKPOINTS": "100"}
    newest, resumed = killed_after_checkpoints_by_time_then_resumed(
        lambda output, settings: run_finetune(model, data, output, settings), tmp_path / "out", by_time, every, 16,
        kill_at="2.8", dies_before=24)
    assert f"Rank 0: training from step {newest} of 48" in resumed
    assert same_weights(whole / "bert_classifier_trained", tmp_path / "out" / "bert_classifier_trained")
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in records if "accuracy" not in line] == list(range(1, 49))  # none twice or lost


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


def test_sigterm_checkpoints_the_step_reached_and_the_next_start_goes_on_from_it(world, tmp_path):
    model, data = world
    stopped = run_finetune(model, data, tmp_path / "out", {**fault_env("sigterm-pod@batch=1.4,rank=0,attempt=0"),
                                                           "CHECKPOINT_EVERY_STEPS": "0"})
    assert stopped.returncode != 0
    assert "stopped on request at step" in stopped.stdout, stopped.stdout[-3000:]
    saved = sorted(path.name for path in (tmp_path / "out" / "checkpoints").glob("step-*.ckpt"))
    assert saved and saved[-1] < "step-00000016.ckpt"  # mid-epoch: only the stop could have written it
    resumed = run_finetune(model, data, tmp_path / "out", {"CHECKPOINT_EVERY_STEPS": "0"})
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"Rank 0: resuming from {saved[-1]}" in resumed.stdout


def test_resuming_with_another_model_or_batch_size_is_refused_naming_each(world, tmp_path):
    model, data = world
    finished, resumed = resumed_with_a_changed_model(run_finetune, model, data, tmp_path, "config.json",
                                                     "layer_norm_eps", 1e-6)
    for said, what in ((finished, f"the finished run in {tmp_path / 'out'}"), (resumed, "checkpoint step-00000016.ckpt")):
        assert f"configuration error: MODEL_DIR: {what} was trained from another model" in said, said[-3000:]
        assert f"configuration error: BATCH_SIZE: {what} was trained with BATCH_SIZE=16, now 8" in said
        assert "another tokenizer" not in said


def test_a_planted_checkpoint_is_refused_naming_it_and_runs_nothing(world, tmp_path):
    """A checkpoint that names a callable (a file someone put on the volume, or a bucket's) is not loaded: the run
    exits 78 naming it, and the callable never ran (trainer_runtime.checkpoints.safe_load)."""
    import torch

    from tests.runtime.test_safe_load import Planted

    model, data = world
    marker = tmp_path / "ran"
    (tmp_path / "out" / "checkpoints").mkdir(parents=True)
    torch.save({"record": {}, "evil": Planted(marker)}, tmp_path / "out" / "checkpoints" / "step-00000099.ckpt")
    result = run_finetune(model, data, tmp_path / "out", {"EPOCHS": "1"})
    assert result.returncode == 78, result.stdout[-3000:]
    assert "configuration error: checkpoint step-00000099.ckpt was refused: it names " in result.stdout
    assert not marker.exists()
    assert "Traceback" not in result.stdout + result.stderr


def test_gradient_accumulation_learns_as_the_larger_batch_does_and_a_resume_with_another_is_refused(tmp_path):
    """GRADIENT_ACCUMULATION_STEPS=2 of BATCH_SIZE 8 is BATCH_SIZE 16 at half the activations: the same examples
    per optimizer step, the same loss at every step and the same weights (to float rounding: the sums' order and
    the batches' padding differ), on two processes under DDP (the first batch's gradients stay local: no_sync)."""
    import torch
    from safetensors.torch import load_file

    root = tmp_path / "world"  # no dropout: a batch of 16 and two of 8 would draw other masks
    model, data = make_model(root / "model"), make_texts(root / "data", train=256, validation=32)
    exact = {"EPOCHS": "2", "PRECISION": "fp32", "CHECKPOINT_EVERY_STEPS": "0"}
    runs = {}
    for name, batch, accumulation in (("larger", "16", "1"), ("accumulated", "8", "2")):
        result = run_finetune(model, data, tmp_path / name,
                              {**exact, "BATCH_SIZE": batch, "GRADIENT_ACCUMULATION_STEPS": accumulation})
        assert result.returncode == 0, result.stdout[-3000:]
        assert (f"Rank 0: training from step 0 of 16 (32 examples a step: BATCH_SIZE {batch} x "
                f"GRADIENT_ACCUMULATION_STEPS {accumulation} x 2 processes)") in result.stdout
        lines = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        runs[name] = [(line["step"], line["loss"]) for line in lines if "accuracy" not in line]
    assert [step for step, _ in runs["accumulated"]] == list(range(1, 17))
    assert [step for step, _ in runs["larger"]] == [step for step, _ in runs["accumulated"]]
    assert all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for (_, a), (_, b) in zip(runs["larger"], runs["accumulated"],
                                                                             strict=True))
    larger = load_file(tmp_path / "larger" / "bert_classifier_trained" / "model.safetensors")
    accumulated = load_file(tmp_path / "accumulated" / "bert_classifier_trained" / "model.safetensors")
    assert all(torch.allclose(larger[key], accumulated[key], rtol=1e-3, atol=1e-5) for key in larger)
    # the accumulation shapes the run: a resume with another is refused, naming it
    again = run_finetune(model, data, tmp_path / "accumulated",
                         {**exact, "BATCH_SIZE": "8", "GRADIENT_ACCUMULATION_STEPS": "4", "EPOCHS": "3"})
    assert again.returncode == 78, again.stdout[-3000:]
    assert "GRADIENT_ACCUMULATION_STEPS: the finished run in" in again.stderr  # its launcher's, before any rendezvous


def test_a_global_batch_resumes_on_another_number_of_processes_with_every_step_as_before(tmp_path):
    """GLOBAL_BATCH_SIZE=32 of BATCH_SIZE 8: 2 processes accumulate 2 batches a step, 1 process 4, and each step
    takes the same 32 examples (trainer_runtime.sampler.RankBatches), so a run killed on 2 processes
    resumes on 1 and ends with the uninterrupted run's losses and weights (to float rounding); without it, the
    resume on another number of processes is refused naming WORLD_SIZE."""
    import torch
    from safetensors.torch import load_file

    root = tmp_path / "world"  # no dropout: the step's masks would differ by rank
    model, data = make_model(root / "model"), make_texts(root / "data", train=256, validation=32)
    kept = {"EPOCHS": "2", "PRECISION": "fp32", "BATCH_SIZE": "8", "GLOBAL_BATCH_SIZE": "32",
            "CHECKPOINT_EVERY_STEPS": "4"}
    whole = run_finetune(model, data, tmp_path / "whole", kept)
    assert whole.returncode == 0, whole.stdout[-3000:]
    killed = run_workload("worker.finetune", SETTINGS, model, data, tmp_path / "killed",
                          {**kept, **fault_env("sigkill@batch=1.6,rank=1,attempt=0")})
    assert killed.returncode != 0 and (tmp_path / "killed" / "checkpoints" / "step-00000004.ckpt").exists()
    resumed = run_workload("worker.finetune", SETTINGS, model, data, tmp_path / "killed", kept, processes=1)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert ("Rank 0: step-00000004.ckpt was taken with 2 processes, now 1: GLOBAL_BATCH_SIZE=32 keeps every step's "
            "examples, the accumulation changes") in resumed.stdout
    assert ("Rank 0: training from step 4 of 16 (32 examples a step: BATCH_SIZE 8 x GRADIENT_ACCUMULATION_STEPS 4 x "
            "1 processes, GLOBAL_BATCH_SIZE 32)") in resumed.stdout, resumed.stdout[-3000:]

    def records(output):  # a step's logged loss is rank 0's share's; an evaluation is the whole split's
        return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]

    assert [line["step"] for line in records(tmp_path / "killed") if "accuracy" not in line] == list(range(1, 17))
    evaluations = [[line["loss"] for line in records(output) if "accuracy" in line]
                   for output in (tmp_path / "whole", tmp_path / "killed")]
    assert len(evaluations[0]) == 2 and evaluations[1] == pytest.approx(evaluations[0], rel=1e-4)
    expected = load_file(tmp_path / "whole" / "bert_classifier_trained" / "model.safetensors")
    got = load_file(tmp_path / "killed" / "bert_classifier_trained" / "model.safetensors")
    assert all(torch.allclose(expected[key], got[key], rtol=1e-3, atol=1e-5) for key in expected)
    # the accumulation alone does not keep the steps' examples on another number of processes
    plain = {**kept, "GLOBAL_BATCH_SIZE": "0", "GRADIENT_ACCUMULATION_STEPS": "2", "MAX_STEPS": "4"}  # a checkpoint
    assert run_finetune(model, data, tmp_path / "plain", plain).returncode == 0
    (tmp_path / "plain" / "summary.json").unlink()  # killed after its checkpoint: a finished run is so on any number
    refused = run_workload("worker.finetune", SETTINGS, model, data, tmp_path / "plain", plain, processes=1)
    assert refused.returncode == 78, refused.stdout[-3000:]
    assert re.search(r"WORLD_SIZE: checkpoint step-\d+\.ckpt was taken with 2 processes, now 1: each process's share "
                     r"of the epoch would change \(GLOBAL_BATCH_SIZE keeps", refused.stdout), refused.stdout[-3000:]


def test_a_token_cache_naming_fewer_classes_than_its_labels_is_refused_naming_it(world, tmp_path):
    """The cache's own check knows the vocabulary; the classes are the workload's: a label the cache's class names do
    not cover (a planted or damaged file of the volume, its size intact) is refused in one line (69), never trained
    on (an out-of-range class would fail inside the loss)."""
    import numpy as np

    model, data = world
    first = run_finetune(model, data, tmp_path / "out", {"MAX_STEPS": "1"})  # the cache is written before step 1
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    (labels,) = (tmp_path / "out" / "token-cache").glob("*/train-labels.tokens")
    values = np.fromfile(labels, dtype=np.int32)
    values[0] = 7  # two classes in the data
    values.tofile(labels)
    again = run_finetune(model, data, tmp_path / "out", {"MAX_STEPS": "1", "RESUME": "false"})
    assert again.returncode == 69, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"the tokenized data in {tmp_path / 'out' / 'token-cache'} has a class outside the 2 it names" \
        in again.stdout + again.stderr
    assert "Traceback" not in again.stdout + again.stderr
