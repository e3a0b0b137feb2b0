"""python -m worker: train the MNIST CNN, alone or as one process of a torchrun gang (a pod of the Job runs
`torchrun ... -m worker`); `--check-config` validates the environment only (exit 0 or 78), `--help` lists the
variables. The program's table: trainer_contract.program_settings.PROGRAMS."""

from trainer_runtime.entry import leave, program_main

if __name__ == "__main__":
    leave(program_main("worker"))
