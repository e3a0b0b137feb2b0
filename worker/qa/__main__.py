"""Seed 002 as a built-in program: fine-tune a pretrained model for SQuAD question answering with Lightning.

    torchrun --standalone --nproc-per-node 2 -m worker.qa      # two processes on this machine
    python -m worker.qa --check-config                         # validate the environment only (exit 0 or 78)

Settings come from environment variables (the Job's ConfigMap) and flags; `python -m worker.qa --help` lists them.
Needs the `hf` extra: pip install 'indexed-trainer[worker,hf]'.
"""

from __future__ import annotations

import importlib.util
import sys

from trainer_contract import exit_codes
from trainer_contract.variables import QaConfig
from worker.distenv import DistEnv
from worker.entry import leave, start


def _checked(config: QaConfig) -> str:
    return (f"model_dir={config.model_dir} dataset_dir={config.dataset_dir} strategy={config.strategy} "
            f"precision={config.precision} epochs={config.epochs} output_dir={config.output_dir}")


# what the workload imports, and the extra that brings it
NEEDS = {"torch": "worker", "transformers": "hf", "lightning": "lightning"}


def _run(config: QaConfig, env: DistEnv) -> int:
    missing = [extra for module, extra in NEEDS.items() if importlib.util.find_spec(module) is None]
    if missing:
        print(f"Rank {env.rank}: error: python -m worker.qa needs {', '.join(NEEDS)}: pip install "
              f"'indexed-trainer[{','.join(NEEDS.values())}]' (the image has them); exiting "
              f"{exit_codes.BAD_CONFIG}", file=sys.stderr, flush=True)
        return exit_codes.BAD_CONFIG
    from worker.qa.train import run  # torch, transformers and Lightning only now: --check-config stays fast

    return run(config, env)


def main(argv: list[str] | None = None) -> int:
    return start(argv, QaConfig, "python -m worker.qa", "Fine-tune a model for SQuAD question answering", _checked,
                 _run)


if __name__ == "__main__":
    leave(main())
