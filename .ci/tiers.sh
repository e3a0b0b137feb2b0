# shellcheck shell=bash
# The README's test command, one tier at a time, and CI's closing count. Sourced by .ci/run;
# tests/test_ci_tiers.py drives these functions with a stand-in pytest.
#
#   tier NAME PYTEST-ARGS...                 run one tier; a failing tier stops the run (pytest's exit 5,
#                                            "no test in this tier", is not a failure)
#   tier_needing VARIABLE NAME PYTEST-ARGS...  the same, only where $VARIABLE names the tier's assets: else one
#                                            line says why, and no pytest starts (a tier whose every test
#                                            skips would close the run on a summary that executed nothing)
#   tier_beside NAME PYTEST-ARGS...          start one tier in the background (a tier that mostly waits, beside
#                                            one that computes); its output is kept until await_tiers
#   await_tiers                              wait for every tier started beside, print each one's output in the
#                                            order they started; any that failed stops the run
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

CI_BESIDE=()

tier_beside() {
  local name="$1"
  mkdir -p "$CI_RESULTS"
  # its own process group (set -m), so that a run stopped early can interrupt the whole tier: pytest then
  # runs its fixtures' teardowns (a Slurm cluster's daemons stopped by PID)
  set -m
  ( tier "$@" ) >"$CI_RESULTS/$name.log" 2>&1 &
  set +m
  CI_BESIDE+=("$name:$!")
  trap stop_tiers_beside EXIT
  echo "ci: tier $name started beside the next ones; its output follows when it ends"
}

await_tiers() {
  local entry pid status failed=0
  for entry in "${CI_BESIDE[@]}"; do
    pid="${entry##*:}"
    status=0
    wait "$pid" || status=$?
    cat "$CI_RESULTS/${entry%:*}.log"
    if [ "$status" != 0 ] && [ "$failed" = 0 ]; then failed=$status; fi
  done
  CI_BESIDE=()
  if [ "$failed" != 0 ]; then exit "$failed"; fi
}

stop_tiers_beside() {
  local entry
  for entry in "${CI_BESIDE[@]}"; do
    kill -INT -- "-${entry##*:}" 2>/dev/null || true
  done
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
