"""The exit-code table (trainer_contract/exit_codes.py) is what every target acts on: changing a code's action
changes the Job's podFailurePolicy and the Slurm script's requeue, with no other edit."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import yaml

from generator.resources import default_values
from generator.targets import spec_of, targets
from trainer_contract import exit_codes
from trainer_contract.exit_codes import BAD_CONFIG, GPU_MISSING, OK, PEER_LOST, STALLED, TERMINATED


@pytest.mark.parametrize(("code", "action"), [
    (OK, "done"), (BAD_CONFIG, "fail"), (GPU_MISSING, "fail"), (PEER_LOST, "free"), (STALLED, "retry"),
    (exit_codes.DATA_UNAVAILABLE, "retry"), (TERMINATED, "stop"),
])
def test_each_code_takes_its_action(code, action):
    assert next(item.action for item in exit_codes.CODES if item.code == code) == action


def _policy(job: dict) -> dict[str, list[int]]:
    rules = job["spec"]["podFailurePolicy"]["rules"]
    return {rule["action"]: rule["onExitCodes"]["values"] for rule in rules if "onExitCodes" in rule}


@pytest.mark.parametrize("stalled", ["retry", "fail", "free"])
def test_the_job_and_the_slurm_script_act_on_the_table(monkeypatch, stalled):
    """STALLED's action as the table says it, and as it might say it: the renders follow."""
    codes = tuple(replace(item, action=stalled, summary=item.summary or "stalled") if item.code == STALLED else item
                  for item in exit_codes.CODES)
    monkeypatch.setattr(exit_codes, "CODES", codes)
    assert (STALLED in exit_codes.codes_taking("fail")) == (stalled == "fail")
    spec = spec_of(default_values())
    job = yaml.safe_load(targets()["kubernetes"].render(spec)[-1].text)
    assert _policy(job) == {"FailJob": list(exit_codes.codes_taking("fail")),
                            "Ignore": list(exit_codes.codes_taking("free", "leave"))}
    script = targets()["slurm"].render(spec)[0].text
    arms = dict(re.findall(r"^  (\d+)\)\n    echo \"[^\"]*\"(?: >&2)?\n?(.*?);;", script, re.M | re.S))
    for item in exit_codes.taking("fail"):
        assert arms[str(item.code)].strip() == 'exit "$code"', item  # not requeued
    for item in exit_codes.taking("stop"):
        assert arms[str(item.code)].strip() == "", item  # falls through to the requeue, uncounted
    counted = set(arms) - {"0"} - {str(code) for code in exit_codes.codes_taking("fail", "stop")}
    assert not counted  # every other code takes the counted branch (*)
