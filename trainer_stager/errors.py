"""How staging fails: retryable (a timeout, a 5xx: try again, then let the pod restart) or not (not found,
401, 403, disk full, offline: retrying cannot help, the Job fails at once)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from trainer_contract import exit_codes
from trainer_contract.storage import StorageUriError, scrubbed

T = TypeVar("T")
# How often a transfer is tried before it gives up and lets the pod restart (retryable failures only), and how long
# it waits first (doubling): the stage step's and the ranks' checkpoint transfers (trainer_runtime's bucket_shares).
ATTEMPTS_VARIABLE, DELAY_VARIABLE = "INDEXED_TRAINER_STAGING_ATTEMPTS", "INDEXED_TRAINER_STAGING_RETRY_SECONDS"


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


def retrying(environ: Mapping[str, str], say: Callable[[str], None]) -> Callable[[Callable[[], T]], T]:
    """``action()`` tried as a transfer is tried: retryable failures again after a back-off, each said."""
    attempts, first_delay = int(environ.get(ATTEMPTS_VARIABLE, "4")), float(environ.get(DELAY_VARIABLE, "2"))
    return lambda action: with_retries(action, attempts=attempts, first_delay=first_delay, say=say)


def exit_code(error: Exception) -> int:
    """Retryable: the pod is restarted (counted); not: the Job fails at once. A fault of no kind the stager names
    is retried (it may be a network's, surfacing through a library as something else); the Job's backoffLimit
    still ends a fault that comes back every time."""
    if not isinstance(error, (StagingError, StorageUriError, OSError)):
        return exit_codes.DATA_UNAVAILABLE
    return exit_codes.DATA_UNAVAILABLE if getattr(error, "retryable", False) else exit_codes.BAD_CONFIG
