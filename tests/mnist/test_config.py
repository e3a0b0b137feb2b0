"""Configuration: environment and flags, validated in one place (no torch involved)."""

import pytest

from trainer_contract.config_reading import load_config
from trainer_contract.program_settings import PROGRAMS, TrainConfig
from trainer_contract.settings import ConfigError, config_fields
from trainer_runtime.distenv import read_dist_env
from trainer_runtime.entry import program_main


def main(argv: list[str]) -> int:
    return program_main("worker", argv)


def test_defaults_apply_without_environment():
    assert load_config({}, config_class=TrainConfig) == TrainConfig()


def test_environment_is_read_and_flags_override_it():
    config = load_config({"EPOCHS": "7", "BATCH_SIZE": "16", "DATA_SHARED": "no"}, {"epochs": "9"}, config_class=TrainConfig)
    assert (config.epochs, config.batch_size, config.data_shared) == (9, 16, False)


def test_every_problem_is_reported_with_its_source():
    with pytest.raises(ConfigError) as caught:
        load_config({"EPOCHS": "many", "LEARNING_RATE": "-1", "MNIST_MIRROR": "ftp://x"}, {"batch_size": "0"}, config_class=TrainConfig)
    assert caught.value.problems == [
        "EPOCHS: 'many' must be a whole number",
        "--batch-size: '0' must be at least 1",
        "LEARNING_RATE: '-1' must be a positive number",
        "MNIST_MIRROR: 'ftp://x' must be an http(s):// or file:// base URL",
    ]


def test_bad_configuration_exits_78_naming_the_variable(capsys, monkeypatch):
    monkeypatch.setenv("EPOCHS", "0")
    assert main([]) == 78
    err = capsys.readouterr().err
    assert "configuration error: EPOCHS: '0' must be at least 1" in err


def test_check_config_passes_without_torch(monkeypatch, capsys):
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    assert main(["--check-config"]) == 0
    assert "configuration is valid" in capsys.readouterr().out


def test_node_rank_must_equal_the_completion_index():
    env = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "JOB_COMPLETION_INDEX": "0", "MASTER_ADDR": "job-0.job", "MASTER_PORT": "29500"}
    with pytest.raises(ConfigError, match=r"GROUP_RANK: this pod is node 1 .* JOB_COMPLETION_INDEX is 0"):
        read_dist_env(env)
    env["JOB_COMPLETION_INDEX"] = "1"
    dist_env = read_dist_env(env)
    assert (dist_env.rank, dist_env.nodes, dist_env.group_rank) == (2, 2, 1)


def test_without_torchrun_it_is_one_process():
    assert read_dist_env({}).world_size == 1


@pytest.mark.parametrize("module", [program.module for program in PROGRAMS])
def test_every_built_in_program_prints_its_help(module, capsys):
    """--help lists every variable with its help, "%" included (argparse formats a help: "2%" once crashed it)."""
    with pytest.raises(SystemExit) as leaving:
        program_main(module, ["--help"])
    assert leaving.value.code == 0
    shown = capsys.readouterr().out
    config_class = next(program.config for program in PROGRAMS if program.module == module)
    assert all(f"[env {item.metadata['env']}]" in " ".join(shown.split()) for item in config_fields(config_class))
