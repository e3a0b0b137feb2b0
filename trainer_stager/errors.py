"""How staging fails: retryable (a timeout, a 5xx: try again, then let the pod restart) or not (not found,
401, 403, disk full, offline: retrying cannot help, the Job fails at once)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from trainer_contract.storage import scrubbed

T = TypeVar("T")


class StagingError(Exception):
    """A fault as one line. Its text is scrubbed here, once for every place it reaches (the stage step's and the
    launcher's logs, the termination message, the failure note on the volume): it often quotes another library's
    error, whose URL may hold a query, a user or a token."""

    def __init__(self, message: str, *, retryable: bool):
        super().__init__(scrubbed(message))
        self.retryable = retryable


def missing_library(what: str, library: str) -> StagingError:
    """``what`` (a URI) needs ``library``, which is not installed here."""
    return StagingError(f"{what}: {library} is not installed here: pip install 'indexed-trainer[staging]' (the image "
                        "has it)", retryable=False)


def with_retries(action: Callable[[], T], *, attempts: int, first_delay: float, say: Callable[[str], None],
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``action()``, again after a retryable StagingError, waiting ``first_delay`` seconds, doubling, at most
    ``attempts`` times in all; the last error is raised."""
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except StagingError as error:
            if not error.retryable or attempt == attempts:
                raise
            say(f"{error}; attempt {attempt} of {attempts} failed, retrying in {delay:g} s")
            sleep(delay)
            delay = min(delay * 2, 60.0)
    raise AssertionError("unreachable")
