"""Supervised fine-tuning of a causal language model: LoRA (peft) or a full fine-tune, DDP + AMP.

    torchrun --standalone --nproc-per-node 2 -m worker.sft      # two processes on this machine
    python -m worker.sft --check-config                         # validate the environment only (exit 0 or 78)

Settings come from environment variables (the Job's ConfigMap) and flags; `python -m worker.sft --help` lists them.
Needs the `hf` extra: pip install 'indexed-trainer[worker,hf]'.
"""

from __future__ import annotations

from trainer_contract.program_settings import SftConfig
from trainer_runtime.entry import leave, workload_main

# what the workload imports, and the extra that brings it
NEEDS = {"torch": "worker", "transformers": "hf", "pyarrow": "hf", "peft": "hf"}


def main(argv: list[str] | None = None) -> int:
    return workload_main("worker.sft", SftConfig, "Supervised fine-tuning of a causal LM (LoRA or full; DDP + AMP)",
                         NEEDS, argv)


if __name__ == "__main__":
    leave(main())
