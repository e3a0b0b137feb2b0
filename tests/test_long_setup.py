"""tests/long_setup.py: a cold machine's minutes-long setup step is not cut by pytest-timeout's per-test clock, and
that clock still cuts the test itself and any other setup that hangs. Run in a pytest of its own (pytester), with
a 2 s clock standing in for setup.cfg's 600 s."""

from __future__ import annotations

from tests.conftest import ROOT

pytest_plugins = ["pytester"]

CONFTEST = '''
import time
import pytest
from long_setup import long_setup


@pytest.fixture(scope="session")
def built(request):
    with long_setup(request, "a cold build", bound=60):
        time.sleep(3)
    return "image"


@pytest.fixture(scope="session")
def hung():
    time.sleep(3)
'''

TESTS = '''
import time
import pytest


@pytest.mark.timeout(2)
def test_first_asker_waits_for_the_build(built):
    time.sleep(1.5)  # the clock restarted after the build: 1.5 s of its own 2 s


def test_later_tests_share_it(built):
    assert built == "image"


@pytest.mark.timeout(2)
def test_the_test_body_is_still_cut(built):
    time.sleep(4)


@pytest.mark.timeout(2)
def test_other_setup_is_still_cut(hung):
    pass
'''


def test_a_long_setup_step_runs_outside_the_test_clock_and_nothing_else_does(pytester):
    pytester.makepyfile(long_setup=(ROOT / "tests" / "long_setup.py").read_text(), conftest=CONFTEST,
                        test_cold=TESTS)
    result = pytester.runpytest_subprocess("-s")  # pytest-timeout is loaded as an installed plugin
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("failed"), outcomes.get("errors")) == (2, 1, 1), result.stdout.str()
    result.stdout.fnmatch_lines(["*test_the_test_body_is_still_cut*Timeout*",
                                 "*test_other_setup_is_still_cut*Timeout*"], consecutive=False)
    said = result.stderr.str()
    assert "a cold build: started (bounded at 1 min; the test's 2 s clock waits for it)" in said
    assert "a cold build: 3 s" in said
