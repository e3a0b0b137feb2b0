"""podFailurePolicy, as the Job controller evaluates it: the first rule a failed pod matches decides what its
failure costs (FailJob: the Job fails at once; Ignore: not counted; Count: counted against the limits), and
no rule matching counts it.

A rule matches on the pod's conditions (onPodConditions: any of them, with its status) or on its containers'
exit codes (onExitCodes: In or NotIn a list, optionally of one container; a container that exited 0 never
matches). FailIndex (with backoffLimitPerIndex) fails the pod's index at once, counted. What matched is worded as the
controller's own FailJob message words it.
"""

from __future__ import annotations

from localjob.records import PodRecord

COUNT, FAIL_JOB, FAIL_INDEX, IGNORE = "Count", "FailJob", "FailIndex", "Ignore"


def match(rules: list[dict], record: PodRecord, namespace: str) -> tuple[str, str]:
    """(action, what matched) of the first rule that matches the failed pod; (Count, "") if none does."""
    pod = f"{namespace}/{record.name}"
    for number, rule in enumerate(rules):
        matched = _matches(rule, record)
        if matched is not None:
            kind, name, value = matched
            what = (f"Container {name} for pod {pod} failed with exit code {value}" if kind == "code"
                    else f"Pod {pod} has condition {value}")
            return rule["action"], f"{what} matching {rule['action']} rule at index {number}"
    return COUNT, ""


def _matches(rule: dict, record: PodRecord) -> tuple[str, str, object] | None:
    on_conditions = rule.get("onPodConditions")
    if on_conditions:
        for wanted in on_conditions:
            for condition in record.conditions:
                if condition["type"] == wanted["type"] and condition["status"] == wanted.get("status", "True"):
                    return "condition", "", condition["type"]
        return None
    on_codes = rule.get("onExitCodes") or {}
    values = set(on_codes.get("values", []))
    for name, code in record.exit_codes.items():
        if code == 0 or on_codes.get("containerName") not in (None, name):
            continue
        if (code in values) == (on_codes.get("operator") == "In"):
            return "code", name, code
    return None
