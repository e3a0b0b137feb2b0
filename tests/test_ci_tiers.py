""".ci/tiers.sh, CI's tier runner, driven with a stand-in pytest: what CI's log ends with is what CI reads.

CI judges a run by its last test-runner summary and its last line: the tiers that run beside the others show their
output after them, ending on one that executed tests, a failing one fails the run, and the last line is the plain
count over every tier.
"""

import itertools
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

# A pytest that reports the tests of the tier its -m selects (TIER_COUNTS: 'marker=passed/skipped/failed;...'),
# after SLEEP_<marker> seconds, writes the JUnit report pytest would, and notes each run's start and end in CALLS.
STAND_IN = textwrap.dedent('''\
    #!/usr/bin/env python3
    import os, sys, time
    args = sys.argv[1:]
    marker = args[args.index("-m") + 1]
    report = next(a.split("=", 1)[1] for a in args if a.startswith("--junitxml="))
    counts = dict(item.split("=") for item in os.environ["TIER_COUNTS"].split(";"))
    passed, skipped, failed = map(int, counts[marker].split("/"))
    with open(os.environ["CALLS"], "a") as calls:
        calls.write(f"start {marker}\\n")
    time.sleep(float(os.environ.get("SLEEP_" + marker.replace(" ", "_"), "0")))
    os.makedirs(os.path.dirname(report), exist_ok=True)
    with open(report, "w") as out:
        out.write(f'<testsuites><testsuite tests="{passed + skipped + failed}" failures="{failed}" errors="0" '
                  f'skipped="{skipped}"/></testsuites>')
    words = [f"{n} {w}" for n, w in ((failed, "failed"), (passed, "passed"), (skipped, "skipped")) if n]
    print(", ".join(words or ["no tests ran"]) + " in 0.01s")
    with open(os.environ["CALLS"], "a") as calls:
        calls.write(f"end {marker}\\n")
    sys.exit(1 if failed else 0 if passed + skipped else 5)
''')

# .ci/run's shape, over the stand-in: two waiting tiers beside the fast and the computing one, the closing count
SEQUENCE = 'waiting() { tier cluster -m "cluster"; tier queue -m "queue"; }; beside waiting waiting; ' \
           'tier fast -m "not slow"; tier training -m "slow"; beside_join; closing_count'


def run_tiers(tmp_path, counts: str, **env: str) -> tuple[int, list[str], list[str]]:
    pytest_path = tmp_path / "pytest"
    pytest_path.write_text(STAND_IN)
    pytest_path.chmod(0o755)
    calls = tmp_path / "calls"
    environment = dict(os.environ, CI_PYTEST=str(pytest_path), CI_PYTHON=sys.executable,
                       CI_RESULTS=str(tmp_path / "results"), TIER_COUNTS=counts, CALLS=str(calls), **env)
    result = subprocess.run(["bash", "-c", f"set -euo pipefail; source {ROOT / '.ci' / 'tiers.sh'}; {SEQUENCE}"],
                            capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=60)
    return result.returncode, result.stdout.splitlines(), calls.read_text().splitlines()


def summaries(lines: list[str]) -> list[str]:
    return [line for line in lines if re.search(r"\b(passed|skipped|failed|no tests ran)\b", line)
            and not line.startswith("ci:")]


def test_the_waiting_tiers_run_beside_the_computing_ones_and_their_output_follows_them(tmp_path):
    code, lines, calls = run_tiers(tmp_path, "not slow=10/1/0;slow=4/0/0;cluster=0/16/0;queue=3/0/0",
                                   SLEEP_not_slow="1")
    assert code == 0, lines
    # the cluster and queue tiers ran while the fast tier did, the training tier after it
    assert calls.index("start not slow") < calls.index("end queue") < calls.index("end not slow"), calls
    assert calls.index("end not slow") < calls.index("start slow"), calls
    assert summaries(lines) == ["10 passed, 1 skipped in 0.01s", "4 passed in 0.01s", "16 skipped in 0.01s",
                                "3 passed in 0.01s"]  # the last runner summary executed tests
    assert lines[-1] == "ci: 17 passed, 0 failed, 17 skipped"  # the plain count CI reads last


@pytest.mark.parametrize("failing", ["cluster", "slow"])
def test_a_failing_tier_fails_the_run_and_every_started_tier_shows_its_output(tmp_path, failing):
    counts = {"not slow": "10/0/0", "slow": "4/0/0", "cluster": "2/0/0", "queue": "3/0/0"}
    counts[failing] = "1/0/1"
    code, lines, calls = run_tiers(tmp_path, ";".join(f"{k}={v}" for k, v in counts.items()))
    assert code == 1
    assert "1 failed, 1 passed in 0.01s" in summaries(lines)
    assert not any(line.startswith("ci: ") and "passed," in line for line in lines)  # no closing count
    if failing == "cluster":  # a failing tier stops its own sequence; the training tier still ends and shows
        assert "start queue" not in calls and "4 passed in 0.01s" in lines
    else:  # the waiting tiers still end, and their output shows after the failed training tier's
        assert lines.index("1 failed, 1 passed in 0.01s") < lines.index("3 passed in 0.01s")


def test_ci_run_uses_the_tier_runner_for_every_tier():
    script = (ROOT / ".ci" / "run").read_text()
    assert "source .ci/tiers.sh" in script and "beside clusters cluster_tiers" in script
    assert script.rstrip().splitlines()[-1] == "closing_count"
    tiers = re.findall(r'^\s*tier (\w+) -m "([^"]+)"', script, re.M)
    assert [name for name, _ in tiers] == ["image", "realnode", "controlplane", "onecore", "slurm", "fast", "training"]


def test_every_kind_of_test_runs_in_exactly_one_tier():
    """Each combination of markers a test can carry is selected by one tier's -m, no more (a test run twice costs
    its minutes twice) and no less (a test no tier selects never runs). A test needs one cluster at most; the
    cluster markers and onecore come with slow (their tests spawn real processes); slurm also marks quick tests,
    which the fast tier runs."""
    from _pytest.mark.expression import Expression

    selections = [Expression.compile(expression) for _, expression in
                  re.findall(r'^\s*tier (\w+) -m "([^"]+)"', (ROOT / ".ci" / "run").read_text(), re.M)]
    markers = ("slow", "slurm", "image", "controlplane", "realnode", "onecore")
    for carried in itertools.product((False, True), repeat=len(markers)):
        marks = {name for name, on in zip(markers, carried, strict=True) if on}
        clusters = marks & {"slurm", "image", "controlplane", "realnode"}
        if len(clusters) > 1 or (clusters | marks & {"onecore"}) - {"slurm"} and "slow" not in marks:
            continue
        chosen = [selection for selection in selections if selection.evaluate(lambda name, marks=marks, **_: name in marks)]
        assert len(chosen) == 1, (sorted(marks), len(chosen))
