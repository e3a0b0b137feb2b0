"""The Job controller's counting of a gang's pods: which failures count against backoffLimit and
backoffLimitPerIndex, which index has failed for good, and when the counts end the Job.

A failed pod is counted by the action its podFailurePolicy rule gave it: FailJob ends the Job at once (and
counts); FailIndex fails the pod's index at once (and counts); Ignore does not count against the limits but does
count for the back-off; Count counts against the Job-wide limit and its index's own. Past the Job-wide limit the
Job fails (BackoffLimitExceeded); an index past its own limit has failed for good and shows in failedIndexes even
when the Job-wide limit ends the Job in the same step (the controller computes both from the same pods); more failed
indexes than maxFailedIndexes fail the Job (MaxFailedIndexesExceeded), and so does every index having either
succeeded or failed (FailedIndexes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localjob import backoff
from localjob.failure_policy import FAIL_INDEX, FAIL_JOB, IGNORE
from localjob.manifests import JobPlan


@dataclass(frozen=True)
class Ended:
    """The Job's end, with the controller's reason and message."""

    complete: bool
    reason: str
    message: str


@dataclass
class Accounting:
    completions: int
    backoff_limit: int
    per_index_limit: int | None = None  # backoffLimitPerIndex
    max_failed_indexes: int | None = None
    failed: int = 0  # failed pods counted against backoffLimit (what .status.failed counts)
    ignored: int = 0  # failed pods a podFailurePolicy Ignore rule matched
    failures_since_success: int = 0  # the job-wide back-off's count: every failed pod, ignored included
    last_failure_of: dict[int | None, float] = field(default_factory=dict)  # per index, and None: the Job's
    succeeded: set[int] = field(default_factory=set)
    failed_indexes: set[int] = field(default_factory=set)
    index_failures: dict[int, int] = field(default_factory=dict)  # counted, per index
    index_absolute: dict[int, int] = field(default_factory=dict)  # counted + ignored, per index
    restarts: dict[int, int] = field(default_factory=dict)  # replacements created, per index

    def __post_init__(self) -> None:
        for counts in (self.index_failures, self.index_absolute, self.restarts):
            for index in range(self.completions):
                counts.setdefault(index, 0)

    @classmethod
    def of(cls, plan: JobPlan) -> Accounting:
        """The counting the Job's spec asks for."""
        limit, maximum = plan.spec.get("backoffLimitPerIndex"), plan.spec.get("maxFailedIndexes")
        return cls(plan.completions, plan.backoff_limit, None if limit is None else int(limit),
                   None if maximum is None else int(maximum))

    def pod_succeeded(self, index: int) -> None:
        if index < self.completions:  # a pod of an index scaled away counts for nothing
            self.succeeded.add(index)
        self.failures_since_success = 0

    def pod_failed(self, index: int, action: str, matched: str, now: float) -> Ended | bool:
        """Count a failed pod of ``index`` by its podFailurePolicy action (``matched``: what the rule matched):
        the Job's end when this ends it, else whether the index gets a replacement (False: it failed for good)."""
        if action == FAIL_JOB:
            self.failed += 1
            return Ended(False, "PodFailurePolicy", matched)
        self.failures_since_success += 1
        self.index_absolute[index] += 1
        self.last_failure_of[None] = self.last_failure_of[index] = now
        if action == IGNORE:
            self.ignored += 1
            return True
        self.failed += 1
        self.index_failures[index] += 1
        index_failed = self.per_index_limit is not None and (
            action == FAIL_INDEX or self.index_failures[index] > self.per_index_limit)
        if index_failed:
            self.failed_indexes.add(index)
        if self.failed > self.backoff_limit:
            return Ended(False, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        if not index_failed:
            return True
        if len(self.failed_indexes) > (self.completions if self.max_failed_indexes is None
                                       else self.max_failed_indexes):
            return Ended(False, "MaxFailedIndexesExceeded",
                         "Job has exceeded the specified maximal number of failed indexes")
        return self.settled() or False

    def settled(self) -> Ended | None:
        """The Job's end once every index has succeeded or, with failed indexes, has succeeded or failed."""
        if len(self.succeeded) == self.completions:
            return Ended(True, "CompletionsReached", "Reached expected number of succeeded pods")
        if self.failed_indexes and len(self.failed_indexes) + len(self.succeeded) >= self.completions:
            return Ended(False, "FailedIndexes", "Job has failed indexes")
        return None

    def resize(self, completions: int, max_failed_indexes: int | None) -> None:
        """completions changed (an Elastic Indexed Job): indexes out of range no longer count as succeeded, and an
        index that comes back runs again."""
        self.completions, self.max_failed_indexes = completions, max_failed_indexes
        self.succeeded = {index for index in self.succeeded if index < completions}
        self.__post_init__()

    def replacing(self, index: int) -> int:
        """A new pod of ``index`` is created: its attempt number (1 for the first pod)."""
        if self.index_absolute[index]:
            self.restarts[index] += 1
        return self.index_absolute[index] + 1

    def ready_at(self, index: int, base: float) -> float:
        """When (time.monotonic()) the controller may create index's next pod: the back-off after a failure."""
        return backoff.ready_at(base, self.per_index_limit is not None, index, self.last_failure_of,
                                self.index_absolute, self.failures_since_success)
