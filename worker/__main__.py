"""Entry point of the worker: the same module runs alone or as one process of a torchrun gang.

    python -m worker                                           # one process, on this machine
    torchrun --standalone --nproc-per-node 2 -m worker         # two processes on this machine
    torchrun --nnodes=2 --nproc-per-node=1 --node-rank=$(JOB_COMPLETION_INDEX) \\
        --master-addr=JOB-0.SERVICE --master-port=29500 -m worker   # as a pod of the Job runs it
    python -m worker --check-config                            # validate the environment only (exit 0 or 78)

Settings come from environment variables (the Job's ConfigMap) and flags; `python -m worker --help` lists them.
"""

from __future__ import annotations

from trainer_contract.program_settings import TrainConfig
from trainer_runtime.distenv import DistEnv
from trainer_runtime.entry import leave, start


def _checked(config: TrainConfig) -> str:
    return (f"epochs={config.epochs} batch_size={config.batch_size} learning_rate={config.learning_rate} "
            f"data_dir={config.data_dir} output_dir={config.output_dir}")


def _run(config: TrainConfig, env: DistEnv) -> int:
    from worker.mnist.train import run  # torch is imported only now: --check-config and --help stay fast

    return run(config, env)


def main(argv: list[str] | None = None) -> int:
    return start(argv, TrainConfig, "python -m worker", "Train the MNIST CNN", _checked, _run)


if __name__ == "__main__":
    leave(main())
