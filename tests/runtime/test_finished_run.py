"""A built-in program's finished run as the launcher reads it before any rendezvous (trainer_runtime.finished_run):
every built-in program registers one, and a transformer program's (trainer_runtime.pretrained.finished_run) is
its summary.json with the run's record, compared with this start's model, data and shaping settings."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from trainer_contract.program_settings import PROGRAMS, FinetuneConfig, SftConfig
from trainer_launcher import programs
from trainer_runtime.finished_run import finished_run_of
from trainer_runtime.pretrained import run_identity
from trainer_runtime.pretrained.finished_run import PretrainedRun


def model_dir(root: Path) -> Path:
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "tokenizer.json").write_text("{}")
    return model


def finished(config, world_size: int = 4, data: bool = False, **scores) -> dict:
    """What rank 0 writes last into OUTPUT_DIR/summary.json (trainer_runtime.pretrained.training.train)."""
    export = config.output_dir / "bert_classifier_trained"
    export.mkdir(parents=True)
    (export / "model.safetensors").write_bytes(b"trained")
    summary = {**scores, "step": 48, "train_seconds": 12.5, **run_identity.record(config, world_size, data=data),
               "export": str(export)}
    (config.output_dir / "summary.json").write_text(json.dumps(summary))
    return summary


@pytest.fixture
def config(tmp_path) -> FinetuneConfig:
    return FinetuneConfig(model_dir=model_dir(tmp_path), output_dir=tmp_path / "out", learning_rate=0.005)


def test_every_built_in_program_tells_its_launcher_about_its_finished_run():
    import worker.launch  # noqa: F401 (registers them)

    for program in PROGRAMS:
        run = programs.kept_run(program.module, [])
        assert isinstance(run.config, program.config), program.module
        assert type(run).__name__ == ("MnistRun" if program.module == "worker" else "PretrainedRun")
        # and the program's own shell reads the same class (trainer_runtime.run_shell)
        assert type(finished_run_of(program.config())) is type(run), program.module
    assert finished_run_of(object()) is None  # a program of the user's keeps no run the shell knows


def test_a_rerun_asking_for_another_precision_is_told_the_run_was_trained_otherwise_and_not_redone(config):
    finished(config, f1=97.4)
    asked = PretrainedRun(dataclasses.replace(config, precision="bf16"))
    assert asked.finished() and asked.changed_settings() == []
    assert "already complete (48 steps, f1 97.4000; it was trained with PRECISION=fp32, not as asked now (a " \
           "finished run is not redone for this)): nothing to do" in asked.describe_finished()
    assert "trained with" not in PretrainedRun(config).describe_finished()
    # a summary of an earlier version recorded the shaping settings alone: nothing to name
    summary = json.loads((config.output_dir / "summary.json").read_text())
    del summary["config"]["precision"]
    (config.output_dir / "summary.json").write_text(json.dumps(summary))
    assert "trained with" not in asked.describe_finished()


def test_no_summary_is_no_finished_run(config):
    run = PretrainedRun(config)
    assert not run.finished() and run.result() is None and run.changed_settings() == []


def test_a_finished_run_is_the_same_on_any_number_of_processes_and_says_its_scores(config):
    finished(config, world_size=4, accuracy=97.5, f1=97.4, loss=0.0812)
    run = PretrainedRun(config)
    assert run.finished() and run.changed_settings() == []  # the launcher's start has another world size
    assert run.result() == "f1 97.4000, accuracy 97.5000, loss 0.0812 after 48 steps"
    assert run.describe_finished() == (
        f"the run in {config.output_dir} is already complete (48 steps, f1 97.4000, accuracy 97.5000, loss 0.0812): "
        "nothing to do, no file changed; for a new run use another OUTPUT_DIR or RESUME=false (the run there is "
        "kept in OUTPUT_DIR/previous-runs/)")


def test_another_shaping_setting_or_model_is_another_run_refused_naming_each(config, tmp_path):
    finished(config, loss=0.1)
    what = f"the finished run in {config.output_dir}"
    faster = FinetuneConfig(model_dir=config.model_dir, output_dir=config.output_dir, learning_rate=0.01)
    problems = PretrainedRun(faster).changed_settings()
    assert problems[0] == f"LEARNING_RATE: {what} was trained with LEARNING_RATE=0.005, now 0.01"
    assert problems[-1].startswith("either put the old model or value(s) back, or start a new run: another OUTPUT_DIR")
    (config.model_dir / "model.safetensors").write_bytes(b"other weights")
    problems = PretrainedRun(config).changed_settings()
    assert problems[0].startswith(f"MODEL_DIR: {what} was trained from another model (revision ")
    assert len(problems) == 2  # the tokenizer is the same
    (config.model_dir / "config.json").unlink()
    config.model_dir.rename(tmp_path / "gone")
    assert PretrainedRun(config).changed_settings()[0].startswith(f"MODEL_DIR: {what} cannot be compared with ")


def test_a_program_that_records_its_data_refuses_other_data(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    config = SftConfig(model_dir=model_dir(tmp_path), dataset_dir=data, output_dir=tmp_path / "out")
    finished(config, data=True, loss=1.5, perplexity=4.48)
    assert PretrainedRun(config).changed_settings() == []
    (data / "train.jsonl").write_text('{"prompt": "a", "completion": "c"}\n')
    assert PretrainedRun(config).changed_settings()[0].startswith(
        f"DATASET_DIR: the finished run in {config.output_dir} was trained on other data (revision ")
    # a file of the data that cannot be read (here /proc/self/mem, whose first page is never mapped: EIO even for
    # root) leaves nothing to compare with, and the line names the setting that holds it
    (data / "train.jsonl").unlink()
    (data / "train.jsonl").symlink_to("/proc/self/mem")
    assert PretrainedRun(config).changed_settings() == [
        f"DATASET_DIR: the finished run in {config.output_dir} cannot be compared with {data} (Input/output error); "
        "stage the model (and data) it was trained on, or start a new run with another OUTPUT_DIR or RESUME=false"]


@pytest.mark.parametrize("planted", [
    '["not", "an", "object"]',
    '{"loss": 0.1, "step": 48}',  # no record: not a finished run's summary
    '{"step": "48", "config": {}, "model_revision": "x", "tokenizer_revision": "y", "world_size": 2}',
    '{"step": 48, "config": [], "model_revision": "x", "tokenizer_revision": "y", "world_size": 2}',
    '{"step": 48, "config": {}, "model_revision": "x", "tokenizer_revision": "y", "world_size": 2, '
    '"content_revisions": ["x"]}',
    "fifo",
    "huge",
    "link",
])
def test_what_is_not_a_finished_runs_summary_reads_as_none(config, tmp_path, planted):
    config.output_dir.mkdir()
    path = config.output_dir / "summary.json"
    if planted == "fifo":
        os.mkfifo(path)  # read without blocking: a FIFO is no summary
    elif planted == "huge":
        summary = {"step": 48, "config": {}, "model_revision": "x", "padding": "x" * (2 << 20)}
        path.write_text(json.dumps(summary))
    elif planted == "link":
        real = tmp_path / "elsewhere.json"
        real.write_text(json.dumps({"step": 48, "config": {}, "model_revision": "x"}))
        path.symlink_to(real)
    else:
        path.write_text(planted)
    run = PretrainedRun(config)
    assert not run.finished() and run.result() is None


def test_an_export_asked_for_after_the_run_finished_is_what_it_exported(config, tmp_path):
    finished(config, loss=0.1)
    asked = tmp_path / "export"
    asked.mkdir()
    PretrainedRun(config).write_export(asked)  # EXPORT_DIR unset: no export asked for
    assert not any(asked.iterdir())
    config = FinetuneConfig(model_dir=config.model_dir, output_dir=config.output_dir, export_dir=asked)
    PretrainedRun(config).write_export(asked)
    assert (asked / "model.safetensors").read_bytes() == b"trained"
    # several exports (sft's adapters and merged model): each under its own name
    second = config.output_dir / "merged"
    second.mkdir()
    (second / "model.safetensors").write_bytes(b"merged")
    summary = json.loads((config.output_dir / "summary.json").read_text())
    summary["export"] = [summary["export"], str(second)]
    (config.output_dir / "summary.json").write_text(json.dumps(summary))
    both = tmp_path / "both"
    both.mkdir()
    PretrainedRun(config).write_export(both)
    assert sorted(path.name for path in both.iterdir()) == ["bert_classifier_trained", "merged"]
    assert (both / "merged" / "model.safetensors").read_bytes() == b"merged"
    # what a summary planted on the volume names outside OUTPUT_DIR never goes to the export's bucket
    elsewhere = tmp_path / "secrets"
    elsewhere.mkdir()
    (elsewhere / "token").write_text("s3cr3t")
    (config.output_dir / "link").symlink_to(elsewhere)
    for named in (str(elsewhere), [str(elsewhere)], str(config.output_dir / "link"), 7, {"a": str(elsewhere)}):
        (config.output_dir / "summary.json").write_text(json.dumps({**summary, "export": named}))
        planted = tmp_path / f"planted-{len(list(tmp_path.iterdir()))}"
        planted.mkdir()
        PretrainedRun(config).write_export(planted)
        assert not any(planted.iterdir()), named


@pytest.mark.parametrize("accuracy", [None, "0.98", [0.98]])
def test_an_mnist_summary_without_a_number_for_its_accuracy_is_no_finished_run(tmp_path, accuracy):
    from trainer_contract.program_settings import TrainConfig
    from worker.mnist.finished_run import MnistRun

    (tmp_path / "model.pt").write_bytes(b"weights")
    (tmp_path / "model.json").write_text(json.dumps({"accuracy": accuracy, "epochs": 2, "config": {}}))
    run = MnistRun(TrainConfig(output_dir=tmp_path))
    assert not run.finished() and run.result() is None
    (tmp_path / "model.json").write_text(json.dumps({"accuracy": 0.98, "epochs": 2, "config": {}}))
    assert run.result() == "test accuracy 0.9800 after 2 epochs"
