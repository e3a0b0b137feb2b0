"""Seed 004 as a built-in program: fine-tune a pretrained model for text classification, DDP + AMP.

    torchrun --standalone --nproc-per-node 2 -m worker.finetune      # two processes on this machine
    python -m worker.finetune --check-config                         # validate the environment only (exit 0 or 78)

Settings come from environment variables (the Job's ConfigMap) and flags; `python -m worker.finetune --help` lists them.
Needs the `hf` extra: pip install 'indexed-trainer[worker,hf]'.
"""

from __future__ import annotations

from trainer_contract import exit_codes
from trainer_contract.variables import FinetuneConfig
from worker.distenv import DistEnv
from worker.entry import leave, missing_extras, start

PROG = "python -m worker.finetune"
# what the workload imports, and the extra that brings it
NEEDS = {"torch": "worker", "transformers": "hf", "pyarrow": "hf"}


def _checked(config: FinetuneConfig) -> str:
    return (f"model_dir={config.model_dir} dataset_dir={config.dataset_dir} "
            f"precision={config.precision} epochs={config.epochs} output_dir={config.output_dir}")


def _run(config: FinetuneConfig, env: DistEnv) -> int:
    if missing_extras(PROG, NEEDS, env.rank):
        return exit_codes.BAD_CONFIG
    from worker.finetune.train import run  # torch and transformers only now: --check-config stays fast

    return run(config, env)


def main(argv: list[str] | None = None) -> int:
    return start(argv, FinetuneConfig, PROG, "Fine-tune a model for text classification (DDP + AMP)", _checked, _run)


if __name__ == "__main__":
    leave(main())
