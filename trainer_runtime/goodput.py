"""The workers' part of goodput (trainer_contract/gang_timeline.py): rank 0 of a round restarted in place notes when
it began to restore and when it resumed, accounts for the fault the round recovers from (one log line, the live
metrics) and keeps the run's goodput, which the live metrics and the run's summary carry.

Every built-in program gets it from the runtime's common paths: the checkpoint store's ``newest`` (the restore) and
the live metrics' ``started`` (the resume) and ``progress``. Outside a round (a launcher that does not restart in
place, a program run by hand) it does nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from trainer_contract.gang_rounds import PROGRESS, gang_directory, generation_of, job_identity, read_progress
from trainer_contract.gang_timeline import Fault, Timeline, goodput_of, totals


class Goodput:
    def __init__(self, environ: Mapping[str, str] = os.environ):
        directory = gang_directory(environ)
        self.generation = generation_of(environ)
        self.active = environ.get("RANK", "0") == "0" and directory is not None and self.generation > 0
        self.directory = directory
        self.timeline = Timeline(directory, job_identity(environ)) if directory is not None else None
        self.first_step: float | None = None
        self.faults: list[Fault] = []
        self._restore_noted = False

    def restore_began(self) -> None:
        """Rank 0 begins to read the checkpoint the round resumes from (the first read of the round)."""
        if self.active and self.timeline is not None and not self._restore_noted:
            self._restore_noted = True
            self.timeline.restore_began(self.generation)

    def resumed(self, log: Callable[[str], None]) -> Fault | None:
        """Rank 0 begins to train: the fault the round recovers from, accounted for and logged in one line."""
        if not self.active or self.timeline is None or self.directory is None:
            return None
        progress = read_progress(self.directory / PROGRESS)
        fault = self.timeline.account(self.generation, (progress.generation, progress.time) if progress else None)
        self.faults = self.timeline.faults()
        self.first_step = self.timeline.first_step()
        if fault is not None:
            log(fault.line(self.goodput()))
        return fault

    def goodput(self, now: float | None = None) -> float | None:
        return goodput_of(self.first_step, self.faults, now)

    def summary(self) -> dict:
        """The run's goodput fields (its summary's), or nothing outside a round."""
        if not self.active or self.first_step is None:
            return {}
        goodput = self.goodput()
        return {"goodput": None if goodput is None else round(goodput, 4), "faults": len(self.faults),
                "fault_seconds": totals(self.faults)}


_account: Goodput | None = None


def goodput_account(environ: Mapping[str, str] | None = None) -> Goodput:
    """This process's account, made on first use."""
    global _account
    if _account is None:
        _account = Goodput(os.environ if environ is None else environ)
    return _account
