"""Reading the small notes the gang's pods leave each other on the shared volume, as data: whoever can write the
volume (another Job on a shared claim, a compromised pod) may have left a FIFO, a link to /dev/zero or a huge file
where a note should be. A note is read only if it is a regular file (links not followed) of at most ``limit``
bytes, without blocking; anything else reads as absent, a longer note too (never a shorter one: a note cut at its
limit would read as another, a list of tokens as fewer). Torch-free.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

NOTE_LIMIT = 4096  # a note is a line or two; more is not ours


def read_note(path: Path, limit: int = NOTE_LIMIT) -> str | None:
    """The text of the note at ``path`` (as UTF-8 with bad bytes replaced), or None when there is none, what is
    there is no regular file, or it holds more than ``limit`` bytes."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        text = os.read(descriptor, limit + 1)
        return None if len(text) > limit else text.decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(descriptor)


def read_json_note(path: Path, limit: int = NOTE_LIMIT) -> dict[str, Any] | None:
    """The JSON object in the note at ``path``, or None: no note, no object (a list, a number), past ``limit``,
    or nested past the parser's depth."""
    try:
        value = json.loads(read_note(path, limit) or "")
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
