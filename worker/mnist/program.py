"""The MNIST worker's run (PROGRAMS' training module for ``python -m worker``): one gang (worker.mnist.train), or,
with REPLICA_GROUPS, one replica group of several (worker.mnist.replicated), in every program's shell."""

from __future__ import annotations

import os

from trainer_contract import replica_groups
from trainer_contract.program_settings import TrainConfig
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.run_shell import run_logged
from worker.mnist import replicated
from worker.mnist import train as gang


def run(config: TrainConfig, env: DistEnv) -> int:
    """Train in every program's shell (trainer_runtime.run_shell); the process exit code (trainer_contract.exit_codes)."""
    # its usage log starts once its checkpoint is taken up (Trainer.setup): a refused resume writes nothing
    return run_logged(config, env, train, usage_at_once=False)


def train(config: TrainConfig, env: DistEnv, log, store: CheckpointStore) -> int:
    """The run inside the shell: as the gang, or as one replica group (a malformed REPLICA_* variable is the run's
    configuration error, 78)."""
    groups = replica_groups.from_environ(os.environ)
    if groups is not None:
        return replicated.train_run(config, env, log, store, groups)
    return gang.train(config, env, log, store)
