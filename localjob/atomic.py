"""local-job's one way to write a file that another process reads (the Job's status, eviction requests and
answers): to a temporary name, then renamed, so a reader never sees half of it."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_text(text)
    os.replace(temp, path)
