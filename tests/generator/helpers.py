"""Run the gen-manifests entry point in-process, as the console script would, capturing its output."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass

from generator.cli import main


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str




class _Stdout(io.StringIO):
    """A text stdout with a binary ``buffer``, as the real one has (the CLI writes bytes to it)."""

    def __init__(self):
        super().__init__()
        self.buffer = io.BytesIO()


def run_main(*args: str) -> Result:
    """Call generator.cli.main with ``args``, capturing stdout (text and bytes) and stderr."""
    out, err = _Stdout(), io.StringIO()
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    code = 0
    try:
        main(list(args))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdout, sys.stderr = old_out, old_err
    return Result(code, out.buffer.getvalue().decode("utf-8") + out.getvalue(), err.getvalue())
