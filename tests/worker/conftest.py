import pytest

from tests.mnist_data import dataset_files, raw_files, synthetic_digits, write_raw


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory):
    """The real digits (first 8,000 train / last 2,000 test) when ../shared has them, else synthetic ones."""
    directory = tmp_path_factory.mktemp("digits")
    write_raw(directory, dataset_files())
    return directory


@pytest.fixture(scope="session")
def small_dir(tmp_path_factory):
    """A small synthetic set for runs whose accuracy does not matter."""
    directory = tmp_path_factory.mktemp("small")
    write_raw(directory, raw_files(synthetic_digits(1024, seed=3), synthetic_digits(256, seed=4)))
    return directory
