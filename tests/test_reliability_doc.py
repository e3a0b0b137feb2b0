"""docs/reliability.md names real tests: every path exists and every named test function is defined in it."""

import re

from tests.conftest import ROOT

DOC = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")


def test_every_test_named_in_the_matrix_exists():
    named, current = 0, ""  # a "::test_..." cell names a test of the path named last
    for cell in re.findall(r"`(tests/[^`]+|::test_\w+)`", DOC):
        if cell.startswith("::"):
            path, function = current, cell[2:]
        else:
            current, _, function = cell.partition("::")
            path = current
        source = (ROOT / path).read_text(encoding="utf-8")
        function = function.partition("[")[0]  # a parametrized test's case: its function
        if function:
            assert re.search(rf"^def {function}\(", source, re.M), f"{path}::{function} does not exist"
        named += 1
    assert named >= 15
