"""What a start takes up in OUTPUT_DIR, the same for every built-in program (a finished run is found before, by every
program's shell: trainer_runtime.finished_run). RESUME=false: rank 0 sets the run there aside
(trainer_runtime.previous_runs) and the run starts from the beginning. RESUME=true: the newest checkpoint that
verifies, refused (78) when it was made otherwise than this start asks (each program says how) before anything is
written; then what an interrupted checkpoint write left beside it is removed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from trainer_contract import exit_codes
from trainer_runtime import previous_runs
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.failures import Refusal

Found = TypeVar("Found")


def take_up(config: Any, store: CheckpointStore, newest: Callable[[], Found | None],
            refusals: Callable[[Found], list[str]], run_files: tuple[str, ...], log: Callable[[str], None],
            is_rank0: bool) -> Found | None:
    """The checkpoint ``newest`` finds (None: from the beginning), once ``refusals`` has no line against it. Rank 0
    alone changes the volume: the run set aside (``run_files``, beside every run's entries) before any rank can
    write, the temporaries cleared."""
    found = newest() if config.resume else None
    problems = [] if found is None else refusals(found)
    if problems:
        raise Refusal(exit_codes.BAD_CONFIG, problems)
    if is_rank0:
        if not config.resume:
            previous_runs.start_anew(config.output_dir, run_files, log)
        store.remove_stale_temporaries()
    return found
