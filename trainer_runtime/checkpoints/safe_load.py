"""Every checkpoint load, for every program: nothing a checkpoint holds runs code when it is read.

A checkpoint is a pickle (torch.save's, and torch.distributed.checkpoint's ``.metadata`` and its non-tensor
items), and unpickling can call any function the file names. So a file planted on the volume, or restored from a
bucket, would run code in every training process with the pod's credentials. Here every load goes through an
allow-list instead:

- ``load``: torch's weights_only unpickler (tensors, containers, numbers, strings), plus ``ALLOWED``;
- ``dcp_load``: torch.distributed.checkpoint with a reader whose ``.metadata`` unpickler admits only DCP's own
  metadata types (``SafeFileSystemReader``) and a planner that reads the non-tensor items with weights_only
  (``SafeLoadPlanner``; DCP's default unpickles them without an allow-list).

Anything else is refused with ``UnsafeCheckpoint`` (a ConfigError: the program exits BAD_CONFIG, 78, naming the
file), never loaded.
"""

from __future__ import annotations

import enum
import functools
import io
import pickle
import re
from pathlib import Path
from typing import IO, Any

import torch

from trainer_contract.settings import ConfigError

# Types a checkpoint of ours needs beyond torch's weights_only defaults: none today. Adding one is a decision
# (the type's constructor runs when a checkpoint is read): name it here, with why.
ALLOWED: tuple[Any, ...] = ()


class UnsafeCheckpoint(ConfigError):
    def __init__(self, name: str, why: str):
        super().__init__([f"checkpoint {name} was refused: {why}; it is not loaded (a checkpoint holds tensors, "
                          "numbers and strings only). Remove it, or start a new run: another OUTPUT_DIR or "
                          "RESUME=false"])


def load(source: Path | IO[bytes], *, name: str | None = None, mmap: bool = False) -> Any:
    """``torch.load`` of ``source`` (a path, or a file object with ``name`` for the messages) on the CPU, through
    the weights_only unpickler."""
    shown = name or (source.name if isinstance(source, Path) else "in memory")
    try:
        with torch.serialization.safe_globals(list(ALLOWED)):
            return torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:  # what weights_only raises for a type it does not admit
        raise UnsafeCheckpoint(shown, _first_line(error)) from None


def _first_line(error: BaseException) -> str:
    """What the unpickler refused, in a line: torch's weights_only message names the global further down."""
    text = str(error)
    named = re.search(r"GLOBAL (\S+) was not an allowed global", text)
    if named:
        return f"it names {named.group(1)}, which a checkpoint never holds"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines or [type(error).__name__])[0]


# torch.distributed.checkpoint's .metadata: its dataclasses and enums, the dtypes and sizes of the tensors it
# indexes, and the paths it records. Nothing here calls anything but a constructor of these types.
_DCP_MODULES = ("torch.distributed.checkpoint.metadata",)
_DCP_NAMES = {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch.serialization", "_get_layout"),
              ("torch", "Size"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
              ("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset")}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _DCP_NAMES:
            return super().find_class(module, name)
        if module in _DCP_MODULES:
            found = super().find_class(module, name)
            if isinstance(found, type) and (hasattr(found, "__dataclass_fields__") or issubclass(found, enum.Enum)):
                return found
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a checkpoint's metadata never holds")


def read_dcp_metadata(directory: Path) -> Any:
    """The ``.metadata`` of a torch.distributed.checkpoint directory, read through the allow-list."""
    try:
        with (directory / ".metadata").open("rb") as handle:
            return _MetadataUnpickler(handle).load()
    except pickle.UnpicklingError as error:
        raise UnsafeCheckpoint(f"{directory.name}/.metadata", _first_line(error)) from None


def dcp_load(state: dict[str, Any], directory: Path) -> None:
    """torch.distributed.checkpoint.load of ``directory`` into ``state`` (resharded to this gang), safely."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    read_dcp_metadata(directory)  # refused here, in this rank's own words, before DCP gathers failures
    reader, planner = _safe_dcp_classes()
    try:
        dcp.load(state, storage_reader=reader(str(directory)), planner=planner())
    except CheckpointException as failed:
        refused = [error for error, _ in failed.failures.values() if isinstance(error, UnsafeCheckpoint)]
        if refused:
            raise refused[0] from None
        raise


@functools.cache
def _safe_dcp_classes() -> tuple[type, type]:
    """DCP's file reader and load planner with the allow-lists (made on first use: importing DCP costs a
    second)."""
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeFileSystemReader(FileSystemReader):
        def read_metadata(self) -> Any:  # no **kwargs: DCP then never falls back to per-rank metadata files
            metadata = read_dcp_metadata(Path(str(self.path)))
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class SafeLoadPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            """A non-tensor item (a step count, a learning rate) through ``load``, where DCP's default unpickles
            anything."""
            item = load(value, name=f"item {read_item.dest_index.fqn}")
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], item)
            else:
                self.state_dict[read_item.dest_index.fqn] = item

    return SafeFileSystemReader, SafeLoadPlanner
