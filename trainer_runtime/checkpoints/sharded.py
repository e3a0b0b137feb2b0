"""The sharded format (STRATEGY=fsdp): one directory per checkpoint, each rank writing its own shard.

``ckpt-e<epoch>-s<step>.dcp/`` (MNIST) or ``step-N.ckpt/`` (the QA job under fsdp, through Lightning's strategy)
holds what torch.distributed.checkpoint writes (one ``__<rank>_0.distcp`` per rank and ``.metadata``), optionally
``extra.pt`` (what a checkpoint holds besides tensors and its record: Lightning's loops, schedulers and callbacks),
and ``manifest.json``: the record (JSON) and the SHA-256 of every other file, each rank's files hashed by that rank
as it finishes writing them. The ranks write into ``.tmp-<name>`` (fsynced); rank 0 then gathers the digests, writes
the manifest and renames the directory into place,
so a crash at any moment leaves the older checkpoints and at most a temporary directory, never read. A directory
whose manifest is missing, or whose files are missing or differ from it, raises CorruptCheckpoint. Loading
reshards to the current world size (torch.distributed.checkpoint's planner), so a run resumes at an epoch
boundary with another number of processes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch.distributed as dist

from trainer_contract.atomic import TEMP_PREFIX, atomic_write, atomic_write_with
from trainer_contract.checkpoint_layout import CorruptCheckpoint, publish
from trainer_contract.digests import file_digest
from trainer_runtime.checkpoints import safe_load
from trainer_runtime.checkpoints.found import Checkpoint
from trainer_runtime.checkpoints.state import TrainingState

if TYPE_CHECKING:
    from trainer_runtime.strategies.base import Strategy

SUFFIX = ".dcp"
EVERY_RANK_WRITES = True
FORMAT = "indexed-trainer sharded checkpoint v1"
MANIFEST = "manifest.json"
EXTRA = "extra.pt"


def write_shards(shards: dict[str, Any], record: dict[str, Any], final: Path, rank: int,
                 extra: dict[str, Any] | None = None) -> None:
    """Every rank calls this (a collective): ``shards`` is this rank's part; ``record`` (JSON) goes to the
    manifest, ``extra`` (rank 0's: anything torch.save writes and safe_load reads back) to EXTRA."""
    begin_shards(shards, record, final, rank, extra=extra)()


def begin_shards(shards: dict[str, Any], record: dict[str, Any], final: Path, rank: int,
                 stage: Callable[[Any], Any] | None = None, group: Any = None,
                 extra: dict[str, Any] | None = None) -> Callable[[], Hashed]:
    """Every rank calls this (a collective) and then the function it returns, which writes the shards (a
    collective too) and, on rank 0, publishes them (manifest, rename); it returns what the rank hashed. With ``stage`` (a copy) and ``group`` (a
    process group of the checkpoint writes' own: their collectives never interleave with the training's), the
    function can run beside the training, which goes on changing its tensors in place (what
    torch.distributed.checkpoint's async_save does, in a thread of the caller's: a daemon, which a process
    that exits on a failure does not wait for)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    directory = final.parent
    temp = directory / f"{TEMP_PREFIX}{final.name}"
    if rank == 0:
        shutil.rmtree(temp, ignore_errors=True)  # left by a write that was interrupted
        temp.mkdir(parents=True)
    if dist.is_initialized():
        dist.barrier()  # nobody writes into the directory before it is fresh
    writer = FileSystemWriter(str(temp), sync_files=True)
    if stage is not None:
        shards = stage(shards)

    def finish() -> Hashed:
        dcp.save(shards, storage_writer=writer, process_group=group)  # returns when every rank's shards are in
        # each rank hashes the files it wrote (still in its page cache): rank 0 hashes 1/world of the bytes, not all
        written = sorted(temp.glob(f"{_shard_prefix(group)}*.distcp"))
        mine = {path.name: file_digest(path) for path in written}
        hashed_here = sum(path.stat().st_size for path in written)
        if rank == 0 and extra is not None:  # hashed into the manifest with the shards
            import torch

            atomic_write_with(temp / EXTRA, lambda handle: torch.save(extra, handle))
        digests = _gathered(mine, group)
        if rank != 0:
            return Hashed(hashed_here, 0, mine)
        total = sum(path.stat().st_size for path in temp.iterdir())
        return Hashed(hashed_here + _publish(temp, final, record, digests), total, mine)

    return finish


class Hashed(NamedTuple):
    """A rank's share of a write's hashing: the bytes it hashed, of every file's (rank 0's count), and the files
    it wrote with their SHA-256s, which it uploads (trainer_runtime/checkpoints/bucket_shares.py)."""

    here: int
    total: int
    mine: dict[str, str]

    def said(self) -> str:
        return f"rank 0 hashed {self.here / 1e6:.1f} of {self.total / 1e6:.1f} MB"


def _shard_prefix(group: Any) -> str:
    """How torch.distributed.checkpoint's FileSystemWriter names this rank's files (``__<rank in the group>_<n>``);
    a file of another name is hashed by rank 0 (_publish), so the names only share the work out."""
    return f"__{dist.get_rank(group) if dist.is_initialized() else 0}_"


def _gathered(mine: dict[str, str], group: Any) -> dict[str, str]:
    """On rank 0, every rank's ``mine`` in one dict (the others: their own); a collective of ``group``."""
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return mine
    found: list[Any] | None = [None] * dist.get_world_size(group) if dist.get_rank(group) == 0 else None
    dist.gather_object(mine, found, dst=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    return {name: digest for part in (found or [mine]) for name, digest in part.items()}


def _publish(temp: Path, final: Path, record: dict[str, Any], digests: dict[str, str]) -> int:
    """Rank 0, every shard written: the manifest (the SHA-256 of each file: the ranks' ``digests`` of what they
    wrote, the rest hashed here), then the directory renamed into place: the commit point. The bytes hashed here."""
    files, hashed = {}, 0
    for path in sorted(temp.iterdir()):
        if path.name not in digests:  # .metadata, extra.pt
            hashed += path.stat().st_size
        files[path.name] = digests.get(path.name) or file_digest(path)
    manifest = {"format": FORMAT, "files": files, "meta": record}
    atomic_write(temp / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    publish(temp, final)
    return hashed


def begin(strategy: Strategy, state: TrainingState, path: Path, rank: int,
          stage: Callable[[Any], Any] | None = None, group: Any = None) -> Callable[[], Hashed]:
    return begin_shards(strategy.sharded_state(), state.to_record(), path, rank, stage, group)


# the checkpoints this process verified (path -> its manifest's bytes): a second verify of the same, unchanged, reads
# no shard again (the QA workload's start checks the record, Lightning's load then checks it before reading)
_verified: dict[Path, bytes] = {}


def verify(path: Path, gang: bool = False) -> dict[str, Any]:
    """The manifest's record of a complete, intact checkpoint directory; CorruptCheckpoint otherwise.

    With ``gang`` (a collective: every rank of the initialized process group calls it for the same ``path``), each
    rank hashes its share of the files and the gang agrees on one verdict, so each byte is read once per gang, not
    once per rank (a full fine-tune's shards are as large as its optimizer state). Alone, a checkpoint this process
    verified before, its manifest unchanged, is not read again."""
    world = dist.get_world_size() if gang and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    try:
        text, manifest = _manifest(path)
        if world == 1 and _verified.get(path) == text:
            return manifest["meta"]
        problem = _first_damaged(path, manifest["files"], sorted(manifest["files"])[rank::world])
    except CorruptCheckpoint as error:
        text, problem = b"", (-1, str(error))  # the manifest itself: before any file
    if world > 1:  # one exchange, whatever each rank found: no rank leaves the collective early
        found: list[Any] = [None] * world
        dist.all_gather_object(found, problem)
        problem = min((seen for seen in found if seen is not None), default=None, key=lambda seen: seen[0])
    if problem is not None:
        raise CorruptCheckpoint(problem[1])
    _verified[path] = text
    return manifest["meta"]


def _manifest(path: Path) -> tuple[bytes, dict[str, Any]]:
    try:
        text = (path / MANIFEST).read_bytes()
        manifest = json.loads(text)
    except FileNotFoundError:
        raise CorruptCheckpoint("no manifest.json: the write did not finish") from None
    except ValueError as exc:
        raise CorruptCheckpoint(f"unreadable manifest.json ({exc})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != FORMAT or ".metadata" not in files \
            or "meta" not in manifest:
        raise CorruptCheckpoint("manifest.json is not an indexed-trainer sharded checkpoint's")
    if not all(isinstance(digest, str) and "/" not in name and name not in (".", "..", MANIFEST)
               for name, digest in files.items()):  # names of files beside it, each with its digest
        raise CorruptCheckpoint("manifest.json lists a file outside its directory or without a digest")
    return text, manifest


def _first_damaged(path: Path, digests: dict[str, str], names: list[str]) -> tuple[int, str] | None:
    """(its place in the manifest, why) for the first of ``names`` that is missing or differs from ``digests``."""
    order = sorted(digests)
    for name in names:
        file = path / name
        if not file.is_file():
            return order.index(name), f"{name} is missing"
        if file_digest(file) != digests[name]:
            return order.index(name), f"{name} does not match its checksum: truncated or corrupt"
    return None


def read_extra(path: Path) -> dict[str, Any]:
    """EXTRA of a verified checkpoint directory (empty when it has none), through safe_load's allow-list."""
    extra = path / EXTRA
    return safe_load.load(extra, name=f"{path.name}/{EXTRA}") if extra.is_file() else {}


def read(path: Path) -> Checkpoint:
    return Checkpoint(path, TrainingState.from_record(verify(path)))


def restore(checkpoint: Checkpoint, strategy: Strategy) -> None:
    """Every rank reads its part of ``checkpoint`` (resharded to this gang) through the allow-lists of
    safe_load."""
    state = strategy.sharded_state()
    safe_load.dcp_load(state, checkpoint.path)
    strategy.load_sharded_state(state)
