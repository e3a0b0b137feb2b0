"""How every built-in program's run ends on a failure it can name (in the shell they share: trainer_runtime.run_shell):
a line each, then the contract's exit code. A refusal (bad configuration 78, data unavailable 69) before the
training; a stop during set-up (143, nothing to save yet); a peer's failure (75/76, trainer_runtime.peer_failures).
Anything else is the program's own failure: it propagates, and counts."""

from __future__ import annotations

from collections.abc import Callable

from trainer_contract import exit_codes
from trainer_contract.settings import ConfigError
from trainer_runtime import peer_failures
from trainer_runtime.stop import Terminated


class Refusal(Exception):
    """The run cannot start as configured: ``code`` (exit_codes), and a line for each problem."""

    def __init__(self, code: int, problems: list[str]):
        super().__init__("\n".join(problems))
        self.code, self.problems = code, problems


NAMED = (Refusal, ConfigError, Terminated, RuntimeError)  # what exit_for may name (RuntimeError: a peer's only)


def exit_for(failure: BaseException, is_rank0: bool, log: Callable[[str], None]) -> int | None:
    """The exit code of ``failure`` once its lines are logged; None when it is none of these (re-raise it)."""
    if isinstance(failure, (Refusal, ConfigError)):  # ConfigError: also a refused checkpoint (safe_load)
        code = failure.code if isinstance(failure, Refusal) else exit_codes.BAD_CONFIG
        for problem in failure.problems:
            log(f"{'configuration error' if code == exit_codes.BAD_CONFIG else 'error'}: {problem}")
        log(f"exiting with code {code} ({exit_codes.meaning(code)})")
        return code
    if isinstance(failure, Terminated):  # a StopRequest's, during set-up: before anything worth saving
        log(f"stopped: {failure} before training started; nothing to save")
        return exit_codes.TERMINATED
    peer = peer_failures.exit_for(failure, is_rank0)  # torch.distributed's DistError is a RuntimeError
    if peer is None:
        return None
    log(peer[1])
    return peer[0]
