"""The built-in programs' settings, declared by concern (trainer_contract/program_settings.py): each variable
declared once, the programs composing the bases and changing only defaults, help or choices."""

import ast
import dataclasses
import inspect
from collections import Counter
from dataclasses import dataclass

import pytest

from trainer_contract import program_settings
from trainer_contract.config_reading import load_config
from trainer_contract.program_settings import (
    BUILT_IN_PROGRAMS,
    FinetuneConfig,
    PretrainedModelSettings,
    QaConfig,
    RunSettings,
    SftConfig,
    TrainConfig,
)
from trainer_contract.settings import ConfigError, changed, choice, parse_positive_int, setting


def test_each_variable_is_declared_once():
    declared = Counter(
        node.args[0].value for node in ast.walk(ast.parse(inspect.getsource(program_settings)))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setting"
        and isinstance(node.args[0], ast.Constant))
    assert declared and [name for name, count in declared.items() if count > 1] == []


@pytest.mark.parametrize("config_class", list(BUILT_IN_PROGRAMS.values()))
def test_every_program_reads_the_run_settings_the_same_way(config_class):
    """A base setting keeps its variable, parser kind, flag, shaping and noting in every program that composes it."""
    assert issubclass(config_class, RunSettings)
    own = {item.name: item for item in dataclasses.fields(config_class)}
    for base in dataclasses.fields(RunSettings):
        item = own[base.name]
        assert [item.metadata[key] for key in ("env", "flag", "shaping", "noted")] == \
            [base.metadata[key] for key in ("env", "flag", "shaping", "noted")]


@pytest.mark.parametrize("config_class, defaults", [
    (TrainConfig, {"epochs": 5, "batch_size": 64, "learning_rate": 0.004, "keep_checkpoints": 3,
                   "checkpoint_every_seconds": 30.0, "strategy": "allreduce"}),
    (QaConfig, {"epochs": 2, "batch_size": 16, "learning_rate": 3e-5, "max_seq_length": 384, "strategy": "fsdp"}),
    (FinetuneConfig, {"epochs": 3, "batch_size": 16, "learning_rate": 2e-5, "weight_decay": 0.01,
                      "checkpoint_every_steps": 500}),
    (SftConfig, {"epochs": 1, "batch_size": 8, "learning_rate": 2e-4, "weight_decay": 0.0, "max_seq_length": 512,
                 "checkpoint_every_steps": 200, "strategy": "ddp"}),
])
def test_a_program_changes_only_the_defaults_it_names(config_class, defaults):
    made = config_class()
    assert {name: getattr(made, name) for name in defaults} == defaults
    assert made.checkpoint_dir == made.output_dir / "checkpoints"


def test_a_narrowed_choice_refuses_the_words_the_program_does_not_take():
    with pytest.raises(ConfigError, match="STRATEGY: 'allreduce' must be one of fsdp, ddp"):
        load_config({"STRATEGY": "allreduce"}, config_class=QaConfig)
    assert load_config({"STRATEGY": "allreduce"}, config_class=TrainConfig).strategy == "allreduce"
    assert "strategy" not in {item.name for item in dataclasses.fields(FinetuneConfig)}  # DDP only: no word


def test_changed_keeps_the_declaration_and_refuses_a_setting_the_base_lacks():
    @dataclass(frozen=True)
    class Base:
        steps: int = setting("STEPS", parse_positive_int, 10, "Steps.", "--n", shaping=True)
        mode: str = setting("MODE", choice("a", "b"), "a", "Mode.")

    @dataclass(frozen=True)
    class Program(Base):
        steps: int = changed(Base, "steps", 20)
        mode: str = changed(Base, "mode", "b", "The program's mode.", choice("b"))

    steps, mode = dataclasses.fields(Program)
    assert (steps.default, steps.metadata["env"], steps.metadata["flag"], steps.metadata["shaping"],
            steps.metadata["help"]) == (20, "STEPS", "--n", True, "Steps.")
    assert (mode.default, mode.metadata["help"], mode.metadata["parse"].choices) == ("b", "The program's mode.", ("b",))
    with pytest.raises(TypeError, match="Base declares no setting 'step'"):
        changed(Base, "step", 1)


def test_the_pretrained_model_programs_share_their_base():
    for config_class in (QaConfig, FinetuneConfig, SftConfig):
        assert issubclass(config_class, PretrainedModelSettings)
    assert not issubclass(TrainConfig, PretrainedModelSettings)
