"""A built-in program: fine-tune a pretrained model for SQuAD question answering with Lightning.

    torchrun --standalone --nproc-per-node 2 -m worker.qa      # two processes on this machine
    python -m worker.qa --check-config                         # validate the environment only (exit 0 or 78)

Settings come from environment variables (the Job's ConfigMap) and flags; `python -m worker.qa --help` lists them.
Needs the `hf` extra: pip install 'indexed-trainer[worker,hf]'.
"""

from __future__ import annotations

from trainer_contract.program_settings import QaConfig
from trainer_runtime.entry import leave, workload_main

# what the workload imports, and the extra that brings it
NEEDS = {"torch": "worker", "transformers": "hf", "lightning": "lightning"}


def main(argv: list[str] | None = None) -> int:
    return workload_main("worker.qa", QaConfig, "Fine-tune a model for SQuAD question answering", NEEDS, argv)


if __name__ == "__main__":
    leave(main())
