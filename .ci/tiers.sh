# shellcheck shell=bash
# The README's test command, one tier at a time, and CI's closing count. Sourced by .ci/run;
# tests/test_ci_tiers.py drives these functions with a stand-in pytest.
#
#   tier NAME PYTEST-ARGS...                 run one tier; a failing tier stops the run (pytest's exit 5,
#                                            "no test in this tier", is not a failure)
#   beside NAME FUNCTION                     FUNCTION's tiers in the background, beside the next ones (the tiers
#                                            that mostly wait, beside those that compute), their output kept in
#                                            $CI_RESULTS/NAME.log
#   beside_join                              wait for them, show their output, and stop the run if one failed
#                                            (also on the run's exit, so a failing foreground tier shows theirs)
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

beside() {
  local name="$1" sequence="$2"
  mkdir -p "$CI_RESULTS"
  BESIDE_LOG="$CI_RESULTS/$name.log"
  echo "ci: tiers $name run beside the next ones; their output follows them (live: $BESIDE_LOG)"
  ( "$sequence" ) > "$BESIDE_LOG" 2>&1 &
  BESIDE_PID=$!
  trap beside_join EXIT
}

beside_join() {
  if [ -z "${BESIDE_PID:-}" ]; then return 0; fi
  local pid="$BESIDE_PID" status=0
  BESIDE_PID=""
  wait "$pid" || status=$?
  cat "$BESIDE_LOG"
  if [ "$status" != 0 ]; then exit "$status"; fi
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
