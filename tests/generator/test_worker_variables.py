"""The generator's copy of the built-in worker's variable names equals the worker's own (worker/config.py)."""

from generator.worker_variables import WORKER_CHOICES, WORKER_VARIABLES, reserved
from worker.config import config_fields
from worker.faults import ENV as FAULT_INJECT


def test_the_generator_knows_exactly_the_workers_variables():
    assert WORKER_VARIABLES == {f.metadata["env"] for f in config_fields()} | {FAULT_INJECT}


def test_no_worker_variable_is_reserved():
    assert not [name for name in WORKER_VARIABLES if reserved(name)]
    assert reserved("RANK") and reserved("PET_NNODES") and reserved("TORCHELASTIC_RUN_ID") and not reserved("RANKS")


def test_the_generator_knows_exactly_the_workers_choices():
    choices = {f.metadata["env"]: f.metadata["parse"].choices for f in config_fields()
               if hasattr(f.metadata["parse"], "choices")}
    assert choices == WORKER_CHOICES
