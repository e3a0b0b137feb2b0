"""The IDX format of MNIST's files (unsigned bytes only): a big-endian magic ``0x000008<dims>``, ``dims`` extents,
then the items. The one reader and writer of it: the data check, the loader, the benchmark's split and the tests'
files. Torch-free."""

from __future__ import annotations

import struct
from typing import BinaryIO

UNSIGNED_BYTE = 0x08
DIMENSIONS = (1, 3)  # labels, images


class IdxError(ValueError):
    """Not a complete IDX file of unsigned bytes; the message says what is wrong."""


def magic(dims: int) -> int:
    return UNSIGNED_BYTE << 8 | dims


def read_header(handle: BinaryIO) -> tuple[int, ...]:
    """The shape in the header at ``handle``'s position, which is left at the first item."""
    head = handle.read(4)
    if len(head) < 4:
        raise IdxError("truncated header")
    (value,) = struct.unpack(">I", head)
    dims = value & 0xFF
    if value != magic(dims) or dims not in DIMENSIONS:
        raise IdxError(f"not an MNIST IDX file (magic 0x{value:08x})")
    extents = handle.read(4 * dims)
    if len(extents) < 4 * dims:
        raise IdxError("truncated header")
    return struct.unpack(f">{dims}I", extents)


def header_size(shape: tuple[int, ...]) -> int:
    return 4 + 4 * len(shape)


def item_count(shape: tuple[int, ...]) -> int:
    count = 1
    for extent in shape:
        count *= extent
    return count


def check_size(size: int, shape: tuple[int, ...]) -> None:
    """IdxError unless a file of ``size`` bytes is exactly the one its header's ``shape`` describes."""
    if size != header_size(shape) + item_count(shape):
        raise IdxError(f"{size} bytes, but its header {list(shape)} needs {header_size(shape) + item_count(shape)}: "
                       "truncated or corrupt")


def split(data: bytes) -> tuple[tuple[int, ...], memoryview]:
    """(shape, items) of a whole IDX file in memory; IdxError if it is not complete."""
    import io

    shape = read_header(io.BytesIO(data[:16]))
    check_size(len(data), shape)
    return shape, memoryview(data)[header_size(shape):]


def encode(shape: tuple[int, ...], items: bytes | memoryview) -> bytes:
    if len(shape) not in DIMENSIONS or len(items) != item_count(shape):
        raise IdxError(f"{len(items)} items do not fill the shape {list(shape)}")
    return struct.pack(f">I{len(shape)}I", magic(len(shape)), *shape) + bytes(items)
