"""Around every built-in program's training (the MNIST worker, worker.finetune, worker.sft, worker.qa), the same way:
a finished run found and left as it is (trainer_runtime.finished_run), the usage log beside the training, the run's
checkpoint store (with rank 0's mirror of the checkpoints in a bucket: checkpoint.storage_uri), and every failure
mapped to the contract's exit code (a refusal's lines and its code; a lost or silent peer 75 or 76:
trainer_runtime.failures)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from trainer_contract import exit_codes
from trainer_contract.progress import say
from trainer_contract.settings import ConfigError
from trainer_runtime.checkpoints.bucket_shares import BucketShares, bucket_of
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import NAMED, Refusal, exit_for
from trainer_runtime.finished_run import finished_run_of
from trainer_runtime.usage_log import UsageLog
from trainer_stager.checkpoint_mirror import CheckpointMirror, mirror_from

Log = Callable[[str], None]
Train = Callable[[Any, DistEnv, Log, CheckpointStore], int]


def usage_log(config: Any, env: DistEnv) -> UsageLog:
    """This process's usage log (USAGE_LOG_SECONDS), not started."""
    return UsageLog(config.output_dir / "logs" / f"usage-rank{env.rank}.log", f"rank {env.rank}",
                    every=config.usage_log_seconds, cuda_device=env.local_rank)  # gang.join's device


def run_logged(config: Any, env: DistEnv, train: Train, usage_at_once: bool = True) -> int:
    """``train(config, env, log, store)`` with every process's usage log running beside it (``usage_at_once``
    False: the program starts its own once it knows it will train: a refused resume writes nothing); ``store``
    holds the run's checkpoints (CHECKPOINT_DIR, named as the program's config names them) and, on rank 0 with
    checkpoint.storage_uri, their mirror, closed at the end, which waits for the newest checkpoint to be in the
    bucket; a failure the contract names becomes its lines and its exit code. First, with RESUME, the program's
    finished run (its BuiltInProgram's reader: trainer_runtime.finished_run): complete with these settings,
    nothing to do and nothing written (exit 0); complete with others, refused (78) naming each, as the launcher
    does before the rendezvous (a start without it alike)."""
    def log(message: str) -> None:
        say(env.rank, message)

    usage = mirror = None
    finished = finished_run_of(config)
    try:
        if finished is not None and finished.resumes() and finished.finished():  # the volume's: every rank reads it
            problems = finished.changed_settings()
            if problems:
                raise Refusal(exit_codes.BAD_CONFIG, problems)
            if env.is_rank0:
                log(finished.describe_finished())
            return exit_codes.OK
        usage = usage_log(config, env).start() if usage_at_once else None
        mirror = _mirror(config, env, log)
        store = CheckpointStore(config.checkpoint_dir, config.checkpoint_naming, keep=config.keep_checkpoints,
                                log=log, mirror=mirror, shares=_shares(mirror, log))
        return train(config, env, log, store)
    except NAMED as failure:
        code = exit_for(failure, env.is_rank0, log)
        if code is None:
            raise
        return code
    finally:
        if mirror is not None:
            mirror.close()
        if usage is not None:
            usage.stop()


def _shares(mirror: CheckpointMirror | None, log: Log) -> BucketShares | None:
    """Every rank's part in the bucket's transfers (checkpoint.storage_uri; its library checked by rank 0's mirror)."""
    uri = bucket_of(os.environ)
    return None if uri is None else BucketShares(uri, log, mirror)


def _mirror(config: Any, env: DistEnv, log: Log) -> CheckpointMirror | None:
    if not env.is_rank0:
        return None
    try:
        return mirror_from(os.environ, config, log)
    except ConfigError as error:  # the bucket's library is missing
        raise Refusal(exit_codes.BAD_CONFIG, error.problems) from None
