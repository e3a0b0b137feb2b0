"""How a built-in program starts, the same for each (the MNIST worker, the workloads of worker/qa/): its
variables and flags read and checked in one place (every problem a line naming its variable, exit BAD_CONFIG),
``--check-config``, then the training, imported only now so that --check-config and --help stay torch-free."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from trainer_contract import exit_codes
from trainer_contract.config_reading import build_parser, load_config
from trainer_contract.program_settings import PROGRAMS
from trainer_contract.settings import ConfigError
from trainer_contract.start_up import import_all
from trainer_contract.warm_start import run_warm
from trainer_runtime.distenv import DistEnv, read_dist_env


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # a bad flag is bad configuration, not a usage error of some other tool
        raise ConfigError([message])


def start(argv: list[str] | None, config_class: type, prog: str, what: str, checked: Callable[[Any], str],
          run: Callable[[Any, DistEnv], int]) -> int:
    """Parse ``argv`` and the environment into ``config_class``; ``checked(config)`` is --check-config's line (a
    ConfigError there refuses the start, --check-config's too), ``run(config, env)`` the training's exit code."""
    warm = run_warm(prog.removeprefix("python -m "))  # a later round's worker, forked by the pod's warm server
    if warm is not None:
        return warm
    parser = build_parser(config_class, prog, what)
    parser.__class__ = _Parser
    try:
        args = parser.parse_args(argv)
        config = load_config(os.environ, vars(args), config_class=config_class)
        env = read_dist_env(os.environ)
        line = checked(config)  # may refuse what this environment cannot run (before any rendezvous)
    except ConfigError as error:
        rank = os.environ.get("RANK", "0")
        for problem in error.problems:
            print(f"Rank {rank}: configuration error: {problem}", file=sys.stderr, flush=True)
        print(f"Rank {rank}: exiting with code {exit_codes.BAD_CONFIG} (bad configuration); see "
              f"`{prog} --help`", file=sys.stderr, flush=True)
        return exit_codes.BAD_CONFIG
    if args.check_config:
        print(f"{prog.removeprefix('python -m ')}: configuration is valid: {line}", flush=True)
        return exit_codes.OK
    return run(config, env)


def leave(code: int) -> None:
    """Exit the process with ``code`` without the interpreter's teardown. By then the run has synced and closed
    everything it wrote (trainer_runtime.run_shell), and on success destroyed its process group; in the teardown
    gloo's threads can still free the last collective's tensors and abort the process (SIGABRT, 134), making a
    rank that finished its work, or one failing with a contract code, a pod that exits 134 (seen in CI under fsdp
    and on a refused checkpoint; trainer_runtime/process_group.py has the other half of this). A failing rank's
    peers lose nothing by it: what it tells them is in the rendezvous store (prepared_once.py), not in this
    process; the teardown (0.8 s with torch loaded) only delays the next round of an in-place restart."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def missing_extras(prog: str, needs: dict[str, str], rank: int) -> bool:
    """Whether a module the program imports is absent (``needs``: module -> the extra that brings it); if so one
    line says what to install."""
    import importlib.util

    if all(importlib.util.find_spec(module) is not None for module in needs):
        return False
    extras = ",".join(dict.fromkeys(needs.values()))
    print(f"Rank {rank}: error: {prog} needs {', '.join(needs)}: pip install 'indexed-trainer[{extras}]' (the image "
          f"has them); exiting {exit_codes.BAD_CONFIG}", file=sys.stderr, flush=True)
    return True


# Attention kernels that need a package of their own (ATTN_IMPLEMENTATION), and the package.
KERNEL_PACKAGES = {"flash_attention_2": "flash_attn"}


def attention_problem(attention: str) -> str | None:
    """Why this environment cannot load a model with ATTN_IMPLEMENTATION ``attention``, or None; torch-free, so that
    --check-config (the check-config init container) refuses it before the gang forms."""
    import importlib.util

    package = KERNEL_PACKAGES.get(attention)
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    return (f"ATTN_IMPLEMENTATION: {attention} needs the flash-attn package (and CUDA GPUs), which this image does "
            "not have: install it into the image, or use sdpa")


def program_main(module: str, argv: list[str] | None = None) -> int:
    """The ``__main__`` of built-in program ``module`` (trainer_contract.program_settings.PROGRAMS): its variables,
    --check-config, then its training module's ``run`` once the extras it needs are there."""
    import importlib

    program = next(program for program in PROGRAMS if program.module == module)
    prog = f"python -m {module}"

    def checked(config: Any) -> str:
        problem = attention_problem(getattr(config, "attn_implementation", "auto"))
        if problem:
            raise ConfigError([problem])
        return " ".join(f"{name}={getattr(config, name)}" for name in program.shown if hasattr(config, name))

    def run(config: Any, env: DistEnv) -> int:
        if missing_extras(prog, program.needs, env.rank):
            return exit_codes.BAD_CONFIG
        import_all(program.start_imports)
        return importlib.import_module(program.training).run(config, env)

    return start(argv, program.config, prog, program.what, checked, run)
