"""python -m worker.staging: the stager (trainer_stager.cli), the init container's and the Slurm stage step's
command (trainer_contract.launcher.STAGE_COMMAND). Torch-free."""

import sys

from trainer_stager.cli import main

if __name__ == "__main__":
    sys.exit(main())
