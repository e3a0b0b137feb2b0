"""Supervised fine-tuning of a causal LM, LoRA or full (`python -m worker.sft --help`: its variables;
docs/workloads.md). Its entry in trainer_contract.program_settings.PROGRAMS says what it imports."""

from trainer_runtime.entry import leave, program_main

if __name__ == "__main__":
    leave(program_main("worker.sft"))
