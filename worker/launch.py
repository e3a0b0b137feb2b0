"""python -m worker.launch: the pod's launcher (trainer_launcher.launch: torchrun, exiting with the worker's code),
knowing the built-in worker's run on the volume (worker.mnist.finished_run) for ``-m worker``."""

import sys

from trainer_contract.launcher import BUILT_IN_WORKER
from trainer_contract.program_settings import PROGRAMS
from trainer_launcher import programs
from trainer_launcher.launch import main
from worker.mnist.finished_run import MnistRun

programs.register(BUILT_IN_WORKER, MnistRun.from_args)
# what each built-in program imports to train (its entry imports it only then: --check-config stays torch-free)
for _program in PROGRAMS:
    programs.register_warm_imports(_program.module, (_program.training,))

if __name__ == "__main__":
    sys.exit(main())
