"""The built-in worker's variables as the generator sees them: reserved names, the defaults a ConfigMap shows."""

import pytest
import yaml

from tests.generator.helpers import run_main
from trainer_contract import gang_rounds, metrics, warm_start
from trainer_contract.config_reading import load_config
from trainer_contract.pod_environment import reserved
from trainer_contract.program_settings import BUILT_IN_PROGRAMS, TrainConfig, program_variables, shown_defaults


def test_no_built_in_programs_variable_is_reserved():
    assert not [name for module in BUILT_IN_PROGRAMS for name in program_variables(module) if reserved(name)]
    assert reserved("RANK") and reserved("PET_NNODES") and reserved("TORCHELASTIC_RUN_ID") and not reserved("RANKS")


def configmap_data(*sets):
    result = run_main(*[arg for item in sets for arg in ("--set", item)])
    assert result.exit_code == 0, result.stderr
    return next(doc for doc in yaml.safe_load_all(result.stdout) if doc["kind"] == "ConfigMap")["data"]


@pytest.mark.parametrize("sets, expected", [
    # the built-in worker: its hyper-parameters shown with the worker's own defaults (TrainConfig)
    ((), {"EPOCHS": "5", "BATCH_SIZE": "64", "LEARNING_RATE": "0.004"}),
    (("config_map.EPOCHS=2",), {"EPOCHS": "2", "BATCH_SIZE": "64", "LEARNING_RATE": "0.004"}),
    (("config_map.BATCH_SIZE=null",), {"EPOCHS": "5", "LEARNING_RATE": "0.004"}),  # null removes a variable
    # another program: none of the worker's variables
    (("entrypoint.module=my_project.train", "config_map.STEPS=9"), {"STEPS": "9"}),
    # a boolean as typed on the command line (a hint's "RESUME=false") is written as the worker reads it
    (("config_map.RESUME=false", "config_map.TENSORBOARD=true", "config_map.EPOCHS=null",
      "config_map.BATCH_SIZE=null", "config_map.LEARNING_RATE=null"), {"RESUME": "false", "TENSORBOARD": "true"}),
])
def test_the_configmap_shows_the_workers_defaults_for_the_built_in_worker_only(sets, expected):
    data = configmap_data(*sets)
    # where, the metrics' port and the launcher's in-place restarts and warm workers: no hyper-parameters
    placed = ("DATA_DIR", "OUTPUT_DIR", metrics.PORT_VARIABLE, gang_rounds.RESTART_IN_PLACE_VARIABLE,
              gang_rounds.MAX_RESTARTS_VARIABLE, gang_rounds.LEAVE_AFTER_VARIABLE, warm_start.WARM_AFTER_VARIABLE)
    assert {key: data[key] for key in data if key not in placed} == expected


def test_the_defaults_shown_are_the_workers_own():
    # as strings, they parse back to the worker's own defaults, and they are the three a user edits first
    assert load_config(shown_defaults(TrainConfig), config_class=TrainConfig) == TrainConfig()
    assert sorted(shown_defaults(TrainConfig)) == ["BATCH_SIZE", "EPOCHS", "LEARNING_RATE"]
