"""Entry point of the worker: the same module runs alone or as one process of a torchrun gang.

    python -m worker                                           # one process, on this machine
    torchrun --standalone --nproc-per-node 2 -m worker         # two processes on this machine
    torchrun --nnodes=2 --nproc-per-node=1 --node-rank=$(JOB_COMPLETION_INDEX) \\
        --master-addr=JOB-0.SERVICE --master-port=29500 -m worker   # as a pod of the Job runs it
    python -m worker --check-config                            # validate the environment only (exit 0 or 78)

Settings come from environment variables (the Job's ConfigMap) and flags; `python -m worker --help` lists them.
"""

from __future__ import annotations

import argparse
import os
import sys

from trainer_contract import exit_codes
from trainer_contract.variables import ConfigError
from worker.config import build_parser, load_config
from worker.distenv import read_dist_env


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # a bad flag is bad configuration, not a usage error of some other tool
        raise ConfigError([message])


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.__class__ = _Parser
    try:
        args = parser.parse_args(argv)
        config = load_config(os.environ, vars(args))
        env = read_dist_env(os.environ)
    except ConfigError as error:
        rank = os.environ.get("RANK", "0")
        for problem in error.problems:
            print(f"Rank {rank}: configuration error: {problem}", file=sys.stderr, flush=True)
        print(f"Rank {rank}: exiting with code {exit_codes.BAD_CONFIG} (bad configuration); see "
              "`python -m worker --help`", file=sys.stderr, flush=True)
        return exit_codes.BAD_CONFIG
    if args.check_config:
        print(f"worker: configuration is valid: epochs={config.epochs} batch_size={config.batch_size} "
              f"learning_rate={config.learning_rate} data_dir={config.data_dir} output_dir={config.output_dir}",
              flush=True)
        return exit_codes.OK
    from worker.train import run  # torch is imported only now: --check-config and --help stay fast

    return run(config, env)


if __name__ == "__main__":
    code = main()
    if code == exit_codes.OK:
        # Finished: everything the run wrote is synced and closed and its process group destroyed. Leave
        # without the interpreter's teardown, where gloo's threads can still free the last collective's
        # tensors and abort the process (SIGABRT), making a rank that finished its work a failed pod (seen in
        # CI under fsdp; worker/process_group.py has the other half of this). A failing rank keeps the usual
        # exit: its peers read its verdict from the store meanwhile, before torchrun stops them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
