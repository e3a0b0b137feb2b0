"""python -m worker.launch: the pod's launcher (trainer_launcher.launch: torchrun, exiting with the worker's code),
knowing each built-in program's finished run on the volume (trainer_runtime.finished_run: the MNIST worker's,
worker.mnist.finished_run; the others', trainer_runtime.pretrained.finished_run)."""

import sys

from trainer_contract.launcher import BUILT_IN_WORKER
from trainer_contract.program_settings import PROGRAMS
from trainer_launcher import programs
from trainer_launcher.launch import main
from trainer_runtime.pretrained.finished_run import PretrainedRun
from worker.mnist.finished_run import MnistRun

FINISHED_RUNS = {BUILT_IN_WORKER: MnistRun}  # every other built-in program fine-tunes a pretrained model
for _program in PROGRAMS:
    programs.register(_program.module, FINISHED_RUNS.get(_program.module, PretrainedRun).reading(_program.module))
    # what it imports to train (its entry imports it only then: --check-config stays torch-free)
    programs.register_warm_imports(_program.module, (_program.training,))

if __name__ == "__main__":
    sys.exit(main())
