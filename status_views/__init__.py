"""What a user sees of a job that runs: one view per engine, each a line per state in one style, and what a job
waits for with the values key to change (waiting.py). kubernetes.py reads the Job, its pods and their live metrics
through kubectl (`./run.sh --status`; local-job status shows a local run with the same describe); slurm.py reads
scontrol and squeue (`./run.sh --slurm --status`, and the wait after `./run.sh --slurm`). Torch-free, and apart
from the generator, which renders and nothing else."""
