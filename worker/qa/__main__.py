"""Seed 002 as a built-in program: fine-tune a pretrained model for SQuAD question answering with Lightning.

    torchrun --standalone --nproc-per-node 2 -m worker.qa      # two processes on this machine
    python -m worker.qa --check-config                         # validate the environment only (exit 0 or 78)

Settings come from environment variables (the Job's ConfigMap) and flags; `python -m worker.qa --help` lists them.
Needs the `hf` extra: pip install 'indexed-trainer[worker,hf]'.
"""

from __future__ import annotations

from trainer_contract import exit_codes
from trainer_contract.variables import QaConfig
from worker.distenv import DistEnv
from worker.entry import leave, missing_extras, start

PROG = "python -m worker.qa"
# what the workload imports, and the extra that brings it
NEEDS = {"torch": "worker", "transformers": "hf", "lightning": "lightning"}


def _checked(config: QaConfig) -> str:
    return (f"model_dir={config.model_dir} dataset_dir={config.dataset_dir} strategy={config.strategy} "
            f"precision={config.precision} epochs={config.epochs} output_dir={config.output_dir}")


def _run(config: QaConfig, env: DistEnv) -> int:
    if missing_extras(PROG, NEEDS, env.rank):
        return exit_codes.BAD_CONFIG
    from worker.qa.train import run  # torch, transformers and Lightning only now: --check-config stays fast

    return run(config, env)


def main(argv: list[str] | None = None) -> int:
    return start(argv, QaConfig, PROG, "Fine-tune a model for SQuAD question answering", _checked, _run)


if __name__ == "__main__":
    leave(main())
