"""checkov over the rendered manifests: zero failed checks, and only the skips .checkov.yaml lists with a reason.

checkov lives in its own virtual environment (.ci/run makes .venv-checkov: its pins clash with ours) and runs
with --skip-download, so it makes no network calls.
"""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from generator.output import write_manifests
from generator.resources import default_values_path
from generator.targets.kubernetes import render_manifests
from generator.validation import validate_values
from generator.values import resolve_values
from tests.conftest import ROOT
from tests.generator.test_pod_security import CASES

CONFIG = ROOT / ".checkov.yaml"
DIGEST = "registry.example.com/indexed-trainer/worker@sha256:" + "0123456789abcdef" * 4


def checkov_binary() -> str:
    found = os.environ.get("CHECKOV") or (ROOT / ".venv-checkov" / "bin" / "checkov")
    if os.path.exists(found) or shutil.which(str(found)):
        return str(found)
    if os.environ.get("CI"):  # .ci/run installs it; a CI run without it must not pass silently
        pytest.fail("checkov is not installed: .ci/run makes .venv-checkov")
    pytest.skip("checkov is not installed: python3 -m venv .venv-checkov && .venv-checkov/bin/pip install checkov")


def render_into(directory, sets):
    values = validate_values(resolve_values(default_values_path(), [], sets))
    write_manifests(render_manifests(values), directory)


def checkov(directory, *extra) -> dict:
    result = subprocess.run([checkov_binary(), "--config-file", str(CONFIG), "-d", str(directory), "-o", "json",
                             *extra], capture_output=True, text=True, timeout=300, cwd=ROOT)
    report = json.loads(result.stdout)
    report = report[0] if isinstance(report, list) else report
    assert report["summary"]["parsing_errors"] == 0, result.stderr[-2000:]
    return report


def failures(report) -> list[str]:
    return [f"{c['check_id']} {c['check_name']} ({c['resource']}, {c['file_path']})"
            for c in report["results"]["failed_checks"]]


def test_every_skip_has_a_reason():
    skips = yaml.safe_load(CONFIG.read_text())["skip-check"]
    lines = {match.group(1): match.group(2) for match in
             re.finditer(r"^\s*-\s*(CKV\w+)\s*#\s*(.+)$", CONFIG.read_text(), re.M)}
    assert skips and set(skips) == set(lines)
    assert all(len(reason.split()) >= 5 for reason in lines.values()), lines


def test_the_values_matrix_renders_with_no_failed_check(tmp_path):
    for case, sets in CASES.items():
        render_into(tmp_path / case, sets)
    report = checkov(tmp_path)
    assert failures(report) == []
    assert report["summary"]["passed"] > 10 * len(CASES)


def test_a_pinned_render_passes_the_skipped_checks_too(tmp_path):
    """The skips are the user's choices: with a namespace, an image digest, imagePullPolicy Always and the job's
    NetworkPolicy (and no secret in the environment) the checks pass without them."""
    render_into(tmp_path, ["namespace=ml", f"image={DIGEST}", "image_pull_policy=Always", "network_policy.enabled=true"])
    report = checkov(tmp_path, "--skip-check", "CKV_K8S_0")  # no such check: the command line skips none
    assert failures(report) == []
    assert report["summary"]["skipped"] == 0
