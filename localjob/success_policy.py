"""successPolicy, as the Job controller evaluates it, and the index notation the Job's status writes.

A rule is met by the succeeded indexes when they include all of its succeededIndexes (with succeededCount: at
least that many of them), or, without succeededIndexes, when at least succeededCount indexes succeeded. The
first rule met completes the Job (SuccessCriteriaMet, then Complete), with the controller's message.
"""

from __future__ import annotations


def parse_indexes(text: str) -> set[int]:
    """A successPolicy's succeededIndexes ("0", "1,3-5") as a set."""
    indexes: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        indexes.update(range(int(first), int(last or first) + 1))
    return indexes


def format_indexes(indexes: set[int]) -> str:
    """Indexes as the Job's status writes them: "0,2-4,7", two in a row as "0,1" ("" for none)."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}" for a, b in runs)


def met(rules: list[dict], succeeded: set[int]) -> str | None:
    """The message of the first rule the succeeded indexes meet, or None."""
    for number, rule in enumerate(rules):
        wanted = parse_indexes(rule["succeededIndexes"]) if "succeededIndexes" in rule else None
        done = succeeded & wanted if wanted is not None else succeeded
        if wanted is not None and "succeededCount" not in rule and done != wanted:
            continue
        if len(done) >= int(rule.get("succeededCount", 0)):
            return f"Matched rules at index {number}"
    return None
