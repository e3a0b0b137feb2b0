"""What a process of the pod spends on its libraries, in CPU seconds: a fresh interpreter that imports what the
process imports before it trains, then exits as that process exits (the launcher through the interpreter's
teardown, a program's rank at once: trainer_runtime/entry.py's leave), with Python's cyclic garbage collector paused
while they import (trainer_contract/start_up.py, as the launcher, each built-in program's entry and the warm
workers import them) against the same with it running; alternating, medians.

    python -m bench.start_up                 # every process kind, 5 rounds
    python -m bench.start_up --repeats 1 --only worker --json start-up.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.stats import ROOT, alternate, render_rows, say_machine
from trainer_contract.program_settings import PROGRAMS

# each process kind -> what it imports before it trains, and how it exits: "teardown" (the interpreter's) or
# "at once" (os._exit)
PROCESSES: dict[str, tuple[tuple[str, ...], str]] = {
    "launcher": (("trainer_launcher.launch",), "teardown"),  # torch, for torchrun's agent (worker/launch.py)
    **{program.module: (program.start_imports, "at once") for program in PROGRAMS},
}

_CHILD = """
import os, sys
from trainer_contract.start_up import import_all
if sys.argv[1] == "paused":
    import_all(sys.argv[3:])
else:
    import importlib
    for name in sys.argv[3:]:
        importlib.import_module(name)
if sys.argv[2] == "at once":
    os._exit(0)
"""


def cpu_seconds(collector: str, modules: tuple[str, ...], exit: str) -> float:
    """The CPU time (user + system) of one fresh interpreter's start, imports and exit."""
    before = os.times()
    subprocess.run([sys.executable, "-c", _CHILD, collector, exit, *modules], cwd=ROOT, check=True, timeout=600)
    after = os.times()
    return after.children_user + after.children_system - before.children_user - before.children_system


def measure(repeats: int, only: list[str] | None = None) -> dict[str, dict[str, float]]:
    results = {}
    for kind, (modules, exit) in PROCESSES.items():
        if only and kind not in only:
            continue
        results[kind] = alternate({collector: lambda collector=collector, modules=modules, exit=exit: cpu_seconds(
            collector, modules, exit) for collector in ("paused", "running")}, repeats)
    return results


def table(results: dict[str, dict[str, float]]) -> str:
    rows = [("measure", "collector paused", "collector running", "ratio", "")]
    for kind, figures in results.items():
        modules, exit = PROCESSES[kind]
        rows.append((f"CPU s of a process's imports, {kind} ({', '.join(modules)}; exit: {exit})",
                     f"{figures['paused']:.2f}", f"{figures['running']:.2f}",
                     f"{figures['paused'] / figures['running']:.2f}", ""))
    return render_rows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.start_up", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="rounds, each process kind measured both ways")
    parser.add_argument("--only", action="append", choices=sorted(PROCESSES), help="this process kind (repeatable)")
    parser.add_argument("--json", type=Path, help="where to write the results")
    args = parser.parse_args(argv)
    results = measure(args.repeats, args.only)
    print(table(results))
    say_machine()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
