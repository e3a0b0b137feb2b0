"""SIGTERM and SIGINT, at any point of a run.

During set-up (checking the output directory, downloading, waiting for the data, building the model) there
is nothing worth saving, so the signal ends the process at once: ``Terminated`` is raised where the process
stands and every writer on the way out removes its temporary (atomic writes, the download's staging
directory). During training the signal is only remembered: every step the gang agrees (``agreed``) whether any
of its processes has one, and if so checkpoints the step reached and stops (worker.mnist, worker.finetune,
worker.qa), so a preemption costs at most one step. During the final save it is remembered too: the model is
written whole, and the run is complete.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from trainer_contract import exit_codes


class Terminated(BaseException):
    """SIGTERM (or SIGINT) arrived while nothing needed saving. A BaseException, as KeyboardInterrupt is, so
    that no ``except Exception`` on the way (a retry loop, a store poll) mistakes it for an error."""

    def __init__(self, signum: int):
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


class StopRequest:
    """Remembers SIGTERM/SIGINT; raises Terminated at once while ``immediate`` is true (set-up)."""

    def __init__(self):
        self.requested = False
        self.immediate = True
        self.listen()

    def listen(self) -> None:
        """(Again) take SIGTERM and SIGINT: a framework that installed its own handlers gives them back."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum, frame):
        self.requested = True
        if self.immediate:
            raise Terminated(signum)

    def defer(self) -> None:
        """From now on only remember the signal (training, the final save)."""
        self.immediate = False

    def ended(self, stopped: Stopped, log: Callable[[str], None]) -> int:
        """The exit code of a process whose gang stopped, said in one line: TERMINATED where the signal arrived here,
        PEER_LOST where it arrived at a peer (a victim: the gang restarts from the checkpoint)."""
        code = exit_codes.TERMINATED if self.requested else exit_codes.PEER_LOST
        log(f"stopped on request at {stopped.where}, checkpointed; exiting {code} ({exit_codes.meaning(code)})")
        return code


class Stopped(Exception):
    """The gang agreed to stop (SIGTERM somewhere in it) and checkpointed the point it reached, ``where`` (a step,
    an epoch's batch): the next start goes on from it. Every workload's loop raises it; ``StopRequest.ended`` turns
    it into the exit code."""

    def __init__(self, where: str):
        super().__init__(f"stopped on request at {where}")
        self.where = where


def ending() -> None:
    """The process has decided how it ends (a refusal its peers are told of at once): from here a signal changes
    nothing. The peers exit as its victims in a moment and torchrun then sends this process SIGTERM, which would
    otherwise make a refusal (69, 78: counted) a stop (143: ignored, the pod made again for the same refusal). Only
    the main thread receives signals (elsewhere: nothing to do)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)


def agreed(flags: tuple[bool, ...], device: Any) -> tuple[bool, ...]:
    """For each of ``flags``, whether any process of the gang has it set: every process calls it at the same step
    (one all-reduce of a few numbers), so that all act together or none does."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return flags
    values = torch.tensor([1.0 if flag else 0.0 for flag in flags], device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return tuple(value > 0 for value in values.tolist())
