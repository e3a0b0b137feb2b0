"""python -m worker.qa: SQuAD question answering with Lightning, one process or a torchrun gang; see `--help`
and docs/workloads.md, and for what it needs, trainer_contract.program_settings.PROGRAMS."""

from trainer_runtime.entry import leave, program_main

if __name__ == "__main__":
    leave(program_main("worker.qa"))
