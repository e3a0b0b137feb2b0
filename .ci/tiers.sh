# shellcheck shell=bash
# The README's test command, one tier at a time, and CI's closing count. Sourced by .ci/run;
# tests/test_ci_tiers.py drives these functions with a stand-in pytest.
#
#   tier NAME PYTEST-ARGS...                 run one tier; a failing tier stops the run (pytest's exit 5,
#                                            "no test in this tier", is not a failure)
#   tier_needing VARIABLE NAME PYTEST-ARGS...  the same, only where $VARIABLE names the tier's assets: else one
#                                            line says why, and no pytest starts (a tier whose every test
#                                            skips would close the run on a summary that executed nothing)
#   closing_count                            one count over every tier's JUnit report, CI's last line

CI_PYTEST="${CI_PYTEST:-.venv/bin/pytest}"
CI_PYTHON="${CI_PYTHON:-.venv/bin/python}"
CI_RESULTS="${CI_RESULTS:-.ci-results}"

tier() {
  local name="$1" begun=$SECONDS status=0
  shift
  echo "ci: tier $name"
  "$CI_PYTEST" -q --durations=25 --junitxml="$CI_RESULTS/$name.xml" "$@" || status=$?
  echo "ci: tier $name took $((SECONDS - begun)) s (exit $status)"
  if [ "$status" != 0 ] && [ "$status" != 5 ]; then exit "$status"; fi
}

tier_needing() {
  local variable="$1" name="$2"
  shift 2
  if [ -z "${!variable:-}" ]; then
    echo "ci: tier $name skipped: $variable unset"
    return 0
  fi
  tier "$name" "$@"
}

closing_count() {
  "$CI_PYTHON" - "$CI_RESULTS" <<'COUNT'
import pathlib, sys, xml.etree.ElementTree as ET
totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for report in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    for suite in ET.parse(report).getroot().iter("testsuite"):
        for key in totals:
            totals[key] += int(suite.get(key, 0))
failed = totals["failures"] + totals["errors"]
passed = totals["tests"] - failed - totals["skipped"]
print(f"ci: {passed} passed, {failed} failed, {totals['skipped']} skipped")
COUNT
}
