"""The names torchrun and the Job set are reserved; none of them is a variable of the built-in worker."""

from worker.contract import WORKER_VARIABLES, reserved


def test_no_worker_variable_is_reserved():
    assert not [name for name in WORKER_VARIABLES if reserved(name)]
    assert reserved("RANK") and reserved("PET_NNODES") and reserved("TORCHELASTIC_RUN_ID") and not reserved("RANKS")
