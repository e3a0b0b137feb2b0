"""Whether a setting refuses a resume is a property of the setting (``shaping=True`` in
trainer_contract/program_settings.py), read by every workload's resume check and said in the generated tables, as is
whether a finished run's rerun names it (``noted=True``): the sets below are the intent, so that a change to one is
deliberate."""

import pytest

from trainer_contract.config_reading import NOTED, config_reference
from trainer_contract.program_settings import FinetuneConfig, QaConfig, SftConfig, TrainConfig
from trainer_contract.settings import config_fields, noted_settings, setting, shaping_settings

SCHEDULE = {"epochs", "batch_size", "learning_rate", "seed", "train_samples"}
# the settings of the programs whose loop is this project's own (AdamWSettings) that shape a run
ADAMW = {"weight_decay", "warmup_steps", "lr_scheduler_type", "max_steps", "gradient_accumulation_steps",
         "global_batch_size"}
# which rows train (TableDataSettings); EVAL_FILES only says which evaluate
TABLES = {"train_files", "train_weights", "eval_fraction"}


@pytest.mark.parametrize("config, shaping", [
    (TrainConfig, SCHEDULE),
    (QaConfig, SCHEDULE | {"max_seq_length", "doc_stride"}),
    (FinetuneConfig, SCHEDULE | ADAMW | TABLES | {"max_seq_length", "text_column", "text_pair_column", "label_column"}),
    (SftConfig, SCHEDULE | ADAMW | TABLES | {"max_seq_length", "packing", "prompt_column", "completion_column",
                                    "messages_column", "lora_rank", "lora_alpha", "lora_dropout", "lora_target_modules",
                                    "chat_template_path"}),
])
def test_each_workload_refuses_a_resume_on_its_shaping_settings_and_says_so(config, shaping):
    assert set(shaping_settings(config)) == shaping
    table = config_reference(config)
    for item in config_fields(config):
        row = next(line for line in table.splitlines() if line.startswith(f"| `{item.metadata['env']}` |"))
        assert row.endswith("A resume with another value is refused. |") is (item.name in shaping), row
        assert row.endswith(f"{NOTED} |") is (item.name in noted_settings(config)), row


@pytest.mark.parametrize("config, noted", [
    (TrainConfig, {"strategy", "precision"}), (QaConfig, {"strategy", "precision"}), (FinetuneConfig, {"precision"}),
    (SftConfig, {"strategy", "precision"})])
def test_a_finished_runs_rerun_names_the_parallelism_and_precision_it_was_trained_with(config, noted):
    assert set(noted_settings(config)) == noted and not set(noted) & set(shaping_settings(config))
    with pytest.raises(TypeError, match="STEPS: a shaping setting refuses another value"):
        setting("STEPS", int, 1, "Steps.", shaping=True, noted=True)


def test_a_checkpoint_records_exactly_the_shaping_and_noted_settings(tmp_path):
    from trainer_runtime.pretrained import run_identity

    config = FinetuneConfig(model_dir=tmp_path)
    recorded = run_identity.record(config, world_size=2)
    assert set(recorded["config"]) == set(shaping_settings(FinetuneConfig)) | set(noted_settings(FinetuneConfig))
    assert recorded["world_size"] == 2 and recorded["config"]["precision"] == "fp32"
    # a noted setting is not compared: a checkpoint taken under fp32 resumes under bf16
    assert run_identity.changes(recorded, run_identity.record(FinetuneConfig(model_dir=tmp_path, precision="bf16"), 2),
                                "checkpoint step-1.ckpt", config) == []
    # TRAIN_FILES' globs as a list (as JSON and a checkpoint read back keep them): the same globs compare equal
    globbed = FinetuneConfig(model_dir=tmp_path, train_files=("chat/*.jsonl",))
    assert run_identity.record(globbed, 2)["config"]["train_files"] == ["chat/*.jsonl"]
    assert run_identity.changes(run_identity.record(globbed, 2), run_identity.record(globbed, 2),
                                "checkpoint step-1.ckpt", globbed) == []
    assert run_identity.changes(recorded, run_identity.record(globbed, 2), "checkpoint step-1.ckpt",
                                globbed)[0].startswith("TRAIN_FILES: ")


def test_a_path_settings_content_is_recorded_and_another_content_at_the_same_path_refuses_the_resume(tmp_path):
    """CHAT_TEMPLATE_PATH names a file: the same path holding another template renders other tokens, so the
    checkpoint keeps the file's digest too; a checkpoint of an earlier version without digests is not refused."""
    from trainer_runtime.pretrained import run_identity

    template = tmp_path / "chat.jinja"
    template.write_text("{{ messages }}")
    config = SftConfig(model_dir=tmp_path / "model", output_dir=tmp_path / "out", chat_template_path=template)
    (tmp_path / "model").mkdir()
    recorded = run_identity.record(config, world_size=1)
    assert list(recorded["content_revisions"]) == ["chat_template_path"]
    assert run_identity.changes(recorded, run_identity.record(config, 1), "checkpoint step-1.ckpt", config) == []
    template.write_text("{{ messages | reverse }}")
    problems = run_identity.changes(recorded, run_identity.record(config, 1), "checkpoint step-1.ckpt", config)
    assert problems[0].startswith(f"CHAT_TEMPLATE_PATH: checkpoint step-1.ckpt was trained with another content at "
                                  f"{template} (revision {recorded['content_revisions']['chat_template_path']}, now ")
    assert len(problems) == 2  # the line, then the ways out
    earlier = {key: value for key, value in recorded.items() if key != "content_revisions"}
    assert run_identity.changes(earlier, run_identity.record(config, 1), "checkpoint step-1.ckpt", config) == []
    # a tokenizer directory: its tokenizer files are what counts, a model's weights beside them are not read
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    (tokenizer / "model.safetensors").write_bytes(b"weights")
    revision = run_identity.content_revision(tokenizer)
    (tokenizer / "model.safetensors").write_bytes(b"other weights")
    assert run_identity.content_revision(tokenizer) == revision
    (tokenizer / "tokenizer_config.json").write_text('{"chat_template": "{{ messages | reverse }}"}')
    assert run_identity.content_revision(tokenizer) != revision
    assert run_identity.content_revision(tmp_path / "missing") is None
