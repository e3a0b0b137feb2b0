"""The Job controller's back-off before it recreates a failed pod: base (10 s), doubled per further failure, at
most 10 minutes. With backoffLimitPerIndex the count is the index's own failures (ignored ones included); else
it is every failed pod of the Job since its last success, ignored ones included, and the clock is the Job's
last failure."""

from __future__ import annotations

BACKOFF_CAP = 600.0  # seconds: the Job controller's MaxJobPodFailureBackOff (10 min)


def backoff_delay(base: float, failures: int) -> float:
    """The delay before a replacement after ``failures`` failures: base, doubled per further one, capped."""
    return 0.0 if failures <= 0 else min(base * 2 ** (failures - 1), BACKOFF_CAP)


def ready_at(base: float, per_index: bool, index: int, last_failure_of: dict[int | None, float],
             index_failures: dict[int, int], failures_since_success: int) -> float:
    """When (time.monotonic()) the controller may create index's next pod."""
    if per_index:
        return last_failure_of.get(index, 0.0) + backoff_delay(base, index_failures[index])
    return last_failure_of.get(None, 0.0) + backoff_delay(base, failures_since_success)
