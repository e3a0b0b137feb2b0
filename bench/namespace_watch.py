"""Counting a directory's namespace operations (creates, renames, deletes) as the kernel reports them (inotify):
what the gang's notes cost an NFS server's directory, measured rather than read from the code. Linux only."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from pathlib import Path

IN_CREATE, IN_DELETE, IN_MOVED_TO = 0x100, 0x200, 0x80
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then the name)


class NamespaceWatch:
    """Records each create, rename into and delete in ``directory`` (not below it) by name, until closed."""

    def __init__(self, directory: Path):
        self._libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.descriptor = self._libc.inotify_init1(os.O_NONBLOCK)
        if self.descriptor < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if self._libc.inotify_add_watch(self.descriptor, str(directory).encode(),
                                        IN_CREATE | IN_DELETE | IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
        self.events: list[tuple[str, str]] = []  # (kind, name)

    def read(self) -> list[tuple[str, str]]:
        """The events so far (create, rename, delete), each with the name it concerned."""
        while True:
            try:
                data = os.read(self.descriptor, 65536)
            except BlockingIOError:
                return self.events
            offset = 0
            while offset < len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size: offset + _EVENT.size + length].rstrip(b"\0").decode()
                kind = "create" if mask & IN_CREATE else "rename" if mask & IN_MOVED_TO else "delete"
                self.events.append((kind, name))
                offset += _EVENT.size + length

    def close(self) -> None:
        os.close(self.descriptor)
