""".ci/tiers.sh, CI's tier runner, driven with a stand-in pytest: what CI's log ends with is what CI reads.

CI judges a run by its last test-runner summary and its last line: a tier whose every test skips (the control
plane's without $KUBE_ASSETS) must not start pytest at all, and the last line is the plain count over every tier.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

# A pytest that reports the tests of the tier its -m selects (TIER_COUNTS: 'marker=passed/skipped;...'),
# writes the JUnit report pytest would, and notes each run in CALLS.
STAND_IN = textwrap.dedent('''\
    #!/usr/bin/env python3
    import os, sys
    args = sys.argv[1:]
    marker = args[args.index("-m") + 1]
    report = next(a.split("=", 1)[1] for a in args if a.startswith("--junitxml="))
    counts = dict(item.split("=") for item in os.environ["TIER_COUNTS"].split(";"))
    passed, skipped = map(int, counts[marker].split("/"))
    with open(os.environ["CALLS"], "a") as calls:
        calls.write(marker + "\\n")
    os.makedirs(os.path.dirname(report), exist_ok=True)
    with open(report, "w") as out:
        out.write(f'<testsuites><testsuite tests="{passed + skipped}" failures="0" errors="0" '
                  f'skipped="{skipped}"/></testsuites>')
    words = [f"{passed} passed"] * bool(passed) + [f"{skipped} skipped"] * bool(skipped)
    print(", ".join(words or ["no tests ran"]) + " in 0.01s")
    sys.exit(0 if passed + skipped else 5)
''')

COUNTS = "not slow=10/1;slow=4/0;controlplane=0/16"
# .ci/run's tier sequence, over the stand-in
SEQUENCE = 'tier fast -m "not slow"; tier training -m "slow"; ' \
           'tier_needing KUBE_ASSETS controlplane -m "controlplane"; closing_count'


def run_tiers(tmp_path, **env: str) -> tuple[list[str], list[str]]:
    pytest_path = tmp_path / "pytest"
    pytest_path.write_text(STAND_IN)
    pytest_path.chmod(0o755)
    calls = tmp_path / "calls"
    environment = {key: value for key, value in os.environ.items() if key != "KUBE_ASSETS"}
    environment.update(CI_PYTEST=str(pytest_path), CI_PYTHON=sys.executable, CI_RESULTS=str(tmp_path / "results"),
                       TIER_COUNTS=COUNTS, CALLS=str(calls), **env)
    result = subprocess.run(["bash", "-c", f"set -euo pipefail; source {ROOT / '.ci' / 'tiers.sh'}; {SEQUENCE}"],
                            capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines(), calls.read_text().splitlines()


def test_a_tier_without_its_assets_starts_no_pytest_and_the_run_closes_on_executed_tests(tmp_path):
    lines, calls = run_tiers(tmp_path)
    assert calls == ["not slow", "slow"]
    assert "ci: tier controlplane skipped: KUBE_ASSETS unset" in lines
    summaries = [line for line in lines if re.search(r"\b(passed|skipped|no tests ran)\b", line)
                 and not line.startswith("ci:")]
    assert summaries[-1].startswith("4 passed")  # the last runner summary executed tests
    assert lines[-1] == "ci: 14 passed, 0 failed, 1 skipped"  # the plain count CI reads last


@pytest.mark.parametrize("assets", ["/opt/kube-assets"])
def test_a_tier_with_its_assets_runs(tmp_path, assets):
    lines, calls = run_tiers(tmp_path, KUBE_ASSETS=assets)
    assert calls == ["not slow", "slow", "controlplane"]
    assert lines[-1] == "ci: 14 passed, 0 failed, 17 skipped"


def test_ci_run_uses_the_tier_runner_for_every_tier():
    script = (ROOT / ".ci" / "run").read_text()
    assert "source .ci/tiers.sh" in script and 'tier_needing KUBE_ASSETS controlplane' in script
    assert script.rstrip().splitlines()[-1] == "closing_count"
