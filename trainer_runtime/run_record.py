"""How every program refuses to go on with settings other than its run's record (a checkpoint's, a finished
run's): the wording, once. A changed setting is bad configuration (exit 78), named with its old and new value,
then the ways out. Torch-free: the launcher reads a finished run's record before any rendezvous."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def changed_setting(variable: str, what: str, recorded: Any, now: Any) -> str:
    """One line: ``variable`` of the run recorded as ``what`` (a checkpoint, the finished run) differs."""
    return f"{variable}: {what} was trained with {variable}={recorded}, now {now}"


def ways_out(output_dir: Path | str, *, put_back: str = "value(s)", kept: str = "") -> str:
    """The line after the refusals: what to put back, or how to start a new run (``kept``: what becomes of the
    old one, in parentheses)."""
    return (f"either put the old {put_back} back, or start a new run: another OUTPUT_DIR (now {output_dir}) or "
            f"RESUME=false{f' ({kept})' if kept else ''}")
