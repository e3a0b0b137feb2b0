"""Kubernetes quantities (trainer_contract/quantities.py), read as the API server reads them, written as the
generator writes them: one definition for the generator's messages and local-job's limits and Downward API."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer_contract.quantities import (
    BINARY,
    DECIMAL,
    cpu_quantity,
    divide_round_up,
    gib_quantity,
    parse_quantity,
    quantity_in,
)


@pytest.mark.parametrize("text, value", [
    ("500m", "0.5"), ("2", "2"), ("4Gi", str(4 * 2**30)), ("1k", "1000"), (".5", "0.5"), ("5.", "5"),
    ("1e3", "1000"), ("1E-3", "0.001"), ("-1", "-1"), ("+2Mi", str(2 * 2**20)), (" 250m ", "0.25"), ("3n", "3e-9"),
    (7, "7"),
])
def test_quantities_read_as_the_api_server_reads_them(text, value):
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["4K", "", "Gi", "1.2.3", "1 Gi", "1e", "0x10", "1ee3", "1Gib", "--1", "1e999999999999"])
def test_what_the_api_server_refuses_is_no_quantity(text):
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(text)


@given(st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False),
       st.sampled_from(sorted(BINARY) + sorted(DECIMAL)))
def test_a_number_and_a_suffix_read_back_as_their_product(number, suffix):
    factor = Decimal(1024) ** BINARY[suffix] if suffix in BINARY else Decimal(10) ** DECIMAL[suffix]
    assert parse_quantity(f"{number}{suffix}") == number * factor


@given(st.text(max_size=20))
def test_any_text_is_a_quantity_or_a_value_error(text):
    try:
        assert isinstance(parse_quantity(text), Decimal)
    except ValueError:
        pass


@given(st.floats(min_value=0.001, max_value=1024))
def test_what_the_generator_writes_reads_back(amount):
    assert parse_quantity(cpu_quantity(amount)) == Decimal(round(amount * 1000)) / 1000
    assert parse_quantity(gib_quantity(amount)) == Decimal(round(amount * 1024)) * 2**20


def test_a_quantity_in_the_values_units_and_the_downward_apis_rounding():
    assert quantity_in("GiB", "512Mi") == 0.5 and quantity_in("cores", "500m") == 0.5
    assert quantity_in("GiB", "4K") is None and quantity_in("GiB", "lots") is None and quantity_in("m", "1") is None
    assert divide_round_up(parse_quantity("500m"), parse_quantity("1")) == 1
    assert divide_round_up(parse_quantity("2"), parse_quantity("1")) == 2
