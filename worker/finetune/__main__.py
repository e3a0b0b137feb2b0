"""python -m worker.finetune (under torchrun in a pod): fine-tune a pretrained model for text classification;
`--help` lists its variables (docs/workloads.md). The program's table: trainer_contract.program_settings.PROGRAMS."""

from trainer_runtime.entry import leave, program_main

if __name__ == "__main__":
    leave(program_main("worker.finetune"))
