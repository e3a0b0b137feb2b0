import pytest

from testbed.mnist_data import dataset_files, raw_files, synthetic_digits, write_raw


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory):
    """The real digits the worker ships (first 8,000 train / last 2,000 test)."""
    directory = tmp_path_factory.mktemp("digits")
    write_raw(directory, dataset_files())
    return directory


@pytest.fixture(scope="session")
def small_dir(tmp_path_factory):
    """A small synthetic set for runs whose accuracy does not matter."""
    directory = tmp_path_factory.mktemp("small")
    write_raw(directory, raw_files(synthetic_digits(1024, seed=3), synthetic_digits(256, seed=4)))
    return directory


@pytest.fixture(scope="session")
def default_run(digits_dir, tmp_path_factory):
    """The default settings (allreduce, 5 epochs, batch 64 per process) under torchrun with 2 processes, on
    the digits: run once, read by every test about it (the training log, files, accuracy, strategies)."""
    from tests.worker.launch import run, torchrun_command, worker_env

    out = tmp_path_factory.mktemp("default-run")
    result = run(torchrun_command(2), worker_env(digits_dir, out), timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result.stdout
