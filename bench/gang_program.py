"""A torch-free stand-in for a training program under the indexed-trainer launcher (python -m bench.gang): it does
what a built-in program's runtime does for the gang's rounds, with sleeps for the training. Each node's local rank
0 records its launcher's token for the attempt; rank 0 notes the restore and the resume (the fault's accounting,
trainer_runtime/goodput.py) and, every GANG_CHECKPOINT_STEPS steps, a checkpoint published (the budget's evidence
of progress). Every rank resumes from the newest checkpoint noted and trains GANG_STEPS steps of GANG_STEP_SECONDS;
no collective: a peer's failure reaches this process through its launcher's round alarm, as it does a real one's
before its next collective."""

from __future__ import annotations

import os
import sys
import time

from trainer_contract.gang_ledger import TOKEN_VARIABLE, record_attempt
from trainer_contract.gang_rounds import PROGRESS, gang_directory, note_progress, read_progress
from trainer_runtime.goodput import goodput_account


def main() -> int:
    steps, step_seconds = int(os.environ["GANG_STEPS"]), float(os.environ["GANG_STEP_SECONDS"])
    every = int(os.environ["GANG_CHECKPOINT_STEPS"])
    node, rank = int(os.environ["GROUP_RANK"]), int(os.environ["RANK"])
    if int(os.environ["LOCAL_RANK"]) == 0 and os.environ.get(TOKEN_VARIABLE):
        record_attempt(os.environ["OUTPUT_DIR"], {node: os.environ[TOKEN_VARIABLE]})
    directory = gang_directory()
    progress = read_progress(directory / PROGRESS) if directory is not None else None
    done = int(progress.checkpoint.removeprefix("step-")) if progress and progress.checkpoint.startswith("step-") \
        else 0
    account = goodput_account()
    account.restore_began()
    account.resumed(lambda line: print(f"Rank {rank}: {line}", flush=True))
    for step in range(done + 1, steps + 1):
        time.sleep(step_seconds)
        if rank == 0 and step % every == 0:
            note_progress(f"step-{step}")
    if rank == 0:
        print(f"Rank 0: trained steps {done + 1} to {steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
