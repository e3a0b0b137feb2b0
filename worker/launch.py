"""python -m worker.launch: the pod's launcher (trainer_launcher.launch: torchrun, exiting with the worker's code),
knowing each built-in program's finished run on the volume (its BuiltInProgram's reader: trainer_runtime.finished_run)
and what it imports to train."""

import sys

from trainer_contract.program_settings import PROGRAMS
from trainer_contract.start_up import heavy_imports

with heavy_imports():  # torch, for torchrun's agent
    from trainer_launcher import programs
    from trainer_launcher.launch import main
    from trainer_runtime.finished_run import reader_of

for _program in PROGRAMS:
    programs.register(_program.module, reader_of(_program).reading(_program.module))
    # what it imports to train (its entry imports it only then: --check-config stays torch-free)
    programs.register_warm_imports(_program.module, _program.start_imports)

if __name__ == "__main__":
    sys.exit(main())
