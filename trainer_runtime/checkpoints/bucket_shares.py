"""A checkpoint's copy in the bucket (checkpoint.storage_uri) moved by every rank of the gang at once, not by one pod.

- Once rank 0 has published a sharded checkpoint written beside the training, each rank uploads the shards it wrote
  (with the SHA-256 it took as it wrote each: nothing is read twice), then rank 0 the rest and the listing, last
  (trainer_stager/checkpoint_bucket.py), in the write's thread (beside.py). The next save waits for it: the
  bucket's newest complete checkpoint is at most one save behind the volume's. A stop's checkpoint is written
  beside an upload in flight and uploaded by every rank once that one is done, before the process exits. One
  written by rank 0 alone (one file) or while the training waits (CHECKPOINT_ASYNC=false) is left to rank 0's
  mirror, beside the training (trainer_stager/checkpoint_mirror.py).
- At a start whose volume holds no checkpoint, each rank fetches a share of the bucket's newest complete one (its
  files by size, largest first, to the rank with the fewest bytes so far), each file verified as it arrives; rank 0
  renames it into place once every share is in, and the start resumes from it as from its own (verified again by
  the gang, each rank a share). The stage step leaves these programs' restores to them (trainer_stager/restore.py).

A failed upload is said and left for the next checkpoint (the volume's is intact); a refused one (credentials, no
such bucket) stops the uploads on every rank. A failed restore ends the start with the stage step's exit codes. The
collectives run on the checkpoint writes' gloo group (side_group.py), whose timeout allows for a transfer: a rank
that finishes its share first waits there for the slowest.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch.distributed as dist

from trainer_contract import checkpoint_layout as layout
from trainer_contract.storage import URI_VARIABLES, StorageUri, parse
from trainer_runtime.checkpoints import side_group
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import Refusal
from trainer_runtime.gang import from_rank0

MB = 1_000_000


def bucket_of(environ: Mapping[str, str]) -> StorageUri | None:
    """checkpoint.storage_uri as the render gives it to every pod, or None."""
    text = environ.get(URI_VARIABLES["checkpoint"])
    return parse(text, "checkpoint") if text else None


class BucketShares:
    """Every rank's part in moving the run's checkpoints to and from ``uri``; ``mirror``: rank 0's
    (trainer_stager/checkpoint_mirror.py), told of each checkpoint the ranks upload."""

    def __init__(self, uri: StorageUri, log: Callable[[str], None], mirror: Any = None):
        self.uri, self.log, self.mirror = uri, log, mirror
        self.stopped = False  # a refused upload: the same on every rank (rank 0's verdict)
        self._group: Any = None

    def group(self) -> Any:
        """The run's side group (side_group.py), made at its first use by every rank (a collective)."""
        if self._group is None:
            self._group = side_group.made()
        return self._group

    def upload(self, checkpoint: Path, mine: dict[str, str]) -> None:
        """Every rank, in the checkpoint write's thread, once rank 0 has published ``checkpoint``: ``mine`` (the
        files this rank wrote, by name, with their SHA-256s) uploaded, then on rank 0 the rest and the listing."""
        from trainer_stager import checkpoint_bucket as remote

        if self.stopped:
            return
        group, rank = self.group(), _rank()
        place, started = self.uri.below(checkpoint.name), time.monotonic()
        withdrawn = _attempt(lambda: remote.withdraw(place)) if rank == 0 else None
        _told(None, group)  # published and withdrawn, before any rank uploads
        sent = withdrawn or _attempt(lambda: remote.upload_share(place, checkpoint, mine))
        outcomes = _gathered((sent, sorted(mine)), group)
        verdict = None
        if rank == 0:
            verdict = self._complete(checkpoint, place, outcomes, time.monotonic() - started)
        if _told(verdict, group) == "stopped":
            self.stopped = True

    def _complete(self, checkpoint: Path, place: StorageUri, outcomes: list[Any], seconds: float) -> str | None:
        """Rank 0, every rank's share sent or not: the rest and the listing, the line; "stopped" when refused."""
        from trainer_stager import checkpoint_bucket as remote

        uploaded = {name for _, names in outcomes for name in names}
        rest = _first_failure([sent for sent, _ in outcomes]) or _attempt(
            lambda: remote.complete_shares(place, checkpoint, uploaded))
        if isinstance(rest, Failure):
            if rest.retryable:
                self.log(f"checkpoint mirror: {checkpoint.name} is not in the bucket: {rest.line}; the volume's copy "
                         "is intact, the next checkpoint tries again")
                return None
            self.log(f"checkpoint mirror stopped: {rest.line}; checkpoints stay on the volume only")
            return "stopped"
        shares = sum(sent for sent, _ in outcomes)
        self.log(f"checkpoint mirror: {checkpoint.name} uploaded to {place.describe} by {len(outcomes)} ranks at once "
                 f"({(shares + rest) / MB:.1f} MB in {seconds:.1f} s; the largest share "
                 f"{max(sent for sent, _ in outcomes) / MB:.1f} MB), its listing last")
        removed = _attempt(lambda: self.mirror.uploaded(checkpoint)) if self.mirror is not None else None
        if isinstance(removed, Failure):  # the next checkpoint's removal tries again
            self.log(f"checkpoint mirror: the checkpoints the volume no longer keeps stay in the bucket: {removed.line}")
        return None

    def restore(self, directory: Path, naming: layout.Naming, env: DistEnv) -> None:
        """Every rank, at a start with RESUME, before it takes up the volume: where ``directory`` holds no
        checkpoint of ``naming``, the bucket's newest complete one fetched into it, each rank a share."""
        from trainer_stager import checkpoint_bucket as remote

        group = self.group()  # made here, in every rank's main thread, when the run has a bucket
        plan = from_rank0(env, lambda: _refused_as_start(lambda: self._plan(directory, naming)))
        if plan is None:
            return
        name, files = plan
        started = time.monotonic()
        place, temporary = self.uri.below(name), remote.restoring(directory, name)
        total = sum(item["bytes"] for item in files.values())
        self._refused(name, _told(_attempt(lambda: _prepare(temporary, total)) if env.is_rank0 else None, group))
        sizes = {file: item["bytes"] for file, item in files.items()}
        mine = {file: files[file] for file in remote.shares(sizes, env.world_size)[env.rank]}
        outcomes = _gathered(_attempt(lambda: self._fetch(place, mine, temporary, env)), group)
        verdict = None
        if env.is_rank0:  # every share in: the checkpoint renamed into place
            verdict = _first_failure(outcomes) or _attempt(lambda: remote.placed(temporary, directory, name, files))
        self._refused(name, _told(verdict if isinstance(verdict, Failure) else None, group))
        if env.is_rank0:
            self.log(f"checkpoint {name} restored from {self.uri.describe} into {directory} by {env.world_size} ranks "
                     f"at once ({len(files)} files, {total / MB:.1f} MB in {time.monotonic() - started:.1f} s; the "
                     f"largest share {max(outcomes) / MB:.1f} MB)")

    def _refused(self, name: str, verdict: Any) -> None:
        """A restore's fault (the same on every rank) ends the start with its exit code."""
        if isinstance(verdict, Failure):
            raise Refusal(verdict.code, [f"restoring {name} from {self.uri.describe}: {verdict.line}"])

    def _plan(self, directory: Path, naming: layout.Naming) -> tuple[str, dict[str, dict]] | None:
        """Rank 0: the bucket's newest complete checkpoint and its files, where the volume holds none."""
        from trainer_stager import checkpoint_bucket as remote
        from trainer_stager.errors import retrying

        on_volume = layout.list_checkpoints(directory, naming)
        if on_volume:
            return None
        tried = retrying(os.environ, self.log)
        name = tried(lambda: remote.newest_complete(self.uri, naming))
        if name is None:
            self.log(f"{self.uri.describe} holds no complete checkpoint: training starts from the beginning")
            return None
        return name, tried(lambda: remote.listing_of(self.uri.below(name)))

    def _fetch(self, place: StorageUri, files: dict[str, dict], temporary: Path, env: DistEnv) -> int:
        """This rank's ``files`` fetched into ``temporary`` (retried), rank 0's progress said; the bytes."""
        from trainer_stager import checkpoint_bucket as remote
        from trainer_stager.errors import retrying
        from trainer_stager.place import Progress

        size = sum(item["bytes"] for item in files.values())
        if env.is_rank0:
            progress = Progress(None, f"rank 0's share of {place.describe}", self.log, total=size).add
        else:
            progress = lambda count: None  # noqa: E731  (one rank's progress says the others')

        def again() -> None:  # an attempt again starts the share anew
            for name in files:
                (temporary / name).unlink(missing_ok=True)
            remote.fetch(place, files, temporary, progress)

        retrying(os.environ, self.log if env.is_rank0 else lambda line: None)(again)
        return size


class Failure:
    """A transfer's fault as the collectives carry it (plain data), with the exit code a start ends with."""

    def __init__(self, error: Exception):
        from trainer_stager.errors import exit_code

        self.line, self.retryable, self.code = str(error), bool(getattr(error, "retryable", True)), exit_code(error)


def _first_failure(outcomes: list[Any]) -> Failure | None:
    """The lowest rank's Failure among every rank's ``outcomes``, its line naming the rank."""
    for rank, outcome in enumerate(outcomes):
        if isinstance(outcome, Failure):
            outcome.line = f"rank {rank}: {outcome.line}"
            return outcome
    return None


def _attempt(action: Callable[[], Any]) -> Any:
    """``action()``, or its transfer fault as a Failure (anything else is this program's bug: raised)."""
    from trainer_contract.storage import StorageUriError
    from trainer_stager.errors import StagingError

    try:
        return action()
    except (StagingError, StorageUriError, OSError) as error:
        return Failure(error)


def _refused_as_start(plan: Callable[[], Any]) -> Any:
    """Rank 0's plan, its transfer fault a Refusal (every rank's, through from_rank0)."""
    outcome = _attempt(plan)
    if isinstance(outcome, Failure):
        raise Refusal(outcome.code, [f"restoring a checkpoint: {outcome.line}"])
    return outcome


def _prepare(temporary: Path, total: int) -> None:
    from trainer_stager.place import check_room

    shutil.rmtree(temporary, ignore_errors=True)  # an attempt cut short
    temporary.mkdir(parents=True)
    check_room(temporary, total)


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _gathered(mine: Any, group: Any) -> list[Any]:
    """On rank 0, every rank's ``mine`` by rank; elsewhere []."""
    if group is None:
        return [mine]
    found: list[Any] | None = [None] * dist.get_world_size(group) if dist.get_rank(group) == 0 else None
    dist.gather_object(mine, found, dst=0, group=group)
    return found or []


def _told(verdict: Any, group: Any) -> Any:
    """Rank 0's ``verdict``, on every rank (and a point no rank passes before rank 0 reaches it)."""
    if group is None:
        return verdict
    box = [verdict]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]
