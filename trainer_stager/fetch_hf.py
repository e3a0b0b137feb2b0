"""hf:// sources: a model or dataset repository of the Hugging Face Hub at a revision, through huggingface_hub
(HF_ENDPOINT for another hub, HF_TOKEN from a Secret for a private or gated one). The revision is resolved to
its commit once; every file is stopped past the size the Hub lists and checked against it and its digest (an LFS
file's sha256, a git blob id otherwise)."""

from __future__ import annotations

import hashlib
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

from trainer_contract.digests import file_digest
from trainer_contract.storage import StorageUri
from trainer_stager.errors import StagingError
from trainer_stager.place import TRANSFERS, Progress, amount, check_room, room


def classify(uri: StorageUri, error: Exception) -> StagingError:
    """A huggingface_hub error as staging's: refused (with the fix) or retryable."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = uri.describe if uri.known_as else f"{uri.text} ({uri.describe})"
    if isinstance(error, GatedRepoError):
        return StagingError(f"{where}: a gated repository: accept its terms on the Hub and give the pod HF_TOKEN "
                            "from a Secret", retryable=False)
    if isinstance(error, RevisionNotFoundError):
        return StagingError(f"{where}: no revision {uri.revision!r}; check the part after '@'", retryable=False)
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, (RepositoryNotFoundError, RemoteEntryNotFoundError)) or status == 404:
        return StagingError(f"{where}: not found, or private: check the name, and for a private repository give "
                            "the pod HF_TOKEN from a Secret", retryable=False)
    if isinstance(error, OfflineModeIsEnabled):
        return StagingError(f"{where}: HF_HUB_OFFLINE is set and it is not staged yet: stage it once online, or "
                            "set the storage_uri to a path on the volume", retryable=False)
    if isinstance(error, HfHubHTTPError) and status in (401, 403):
        return StagingError(f"{where}: {status}: the token may not read it; check HF_TOKEN's Secret",
                            retryable=False)
    return StagingError(f"{where}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
                        retryable=True)


def fetch(uri: StorageUri, into: Path, progress: Progress, patterns: dict[str, list[str] | None] | None = None
          ) -> dict:
    """The repository's files at the revision into ``into``, those ``patterns`` (allow, ignore: as
    snapshot_download takes them) select; the commit and each file's size and digest, and what was left out."""
    from huggingface_hub import hf_hub_download

    patterns = patterns or {"allow": None, "ignore": None}
    try:
        info, listed, siblings = _listing(uri, patterns)
        progress.total = sum(sibling.size or 0 for sibling in siblings)
        check_room(into, progress.total)

        def fetch_one(sibling) -> dict:
            bar = _bounded_bar(uri, sibling, into, progress)
            hf_hub_download(uri.repo, sibling.rfilename, repo_type=uri.repo_type, revision=info.sha,
                            local_dir=into, tqdm_class=bar)
            verified = _verify(uri, into / sibling.rfilename, sibling)
            progress.add(verified["bytes"] - bar.told)  # what no bar told (a transfer of xet's)
            return verified

        # TRANSFERS files at a time, as snapshot_download(max_workers=8) does: one file's hashing overlaps
        # another's transfer
        with ThreadPoolExecutor(max_workers=TRANSFERS) as pool:
            futures = {sibling.rfilename: pool.submit(fetch_one, sibling) for sibling in siblings}
            try:
                files = {name: future.result() for name, future in futures.items()}
            finally:
                for future in futures.values():
                    future.cancel()  # after a failure, the files not begun yet are not fetched
    except StagingError:
        raise
    except Exception as error:  # huggingface_hub's and httpx's errors: classified, never a traceback
        raise classify(uri, error) from None
    shutil.rmtree(into / ".cache", ignore_errors=True)  # hf_hub_download's own bookkeeping
    kept = {sibling.rfilename for sibling in siblings}
    left_out = [sibling for sibling in listed if sibling.rfilename not in kept]
    return {"repo": uri.repo, "repo_type": uri.repo_type, "revision": uri.revision, "commit": info.sha,
            "files": files, "patterns": patterns,
            "left_out": {"files": len(left_out), "bytes": sum(sibling.size or 0 for sibling in left_out)}}


def _listing(uri: StorageUri, patterns: dict[str, list[str] | None]) -> tuple[Any, list, list]:
    """The Hub's answer for the revision, every file it lists (each name checked to land inside the directory) and
    those ``patterns`` select (at least one, where it lists any)."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import filter_repo_objects

    info = HfApi().repo_info(uri.repo, repo_type=uri.repo_type, revision=uri.revision, files_metadata=True)
    listed = list(getattr(info, "siblings", None) or [])  # a model's or a dataset's files
    for sibling in listed:  # the listing is the Hub's word: a name that would land outside is refused
        if not inside_name(sibling.rfilename):
            raise StagingError(f"{uri.text}: the Hub lists a file named {sibling.rfilename[:200]!r}, which would "
                               "land outside the directory: refused (check HF_ENDPOINT)", retryable=False)
    siblings = list(filter_repo_objects(listed, allow_patterns=patterns["allow"],
                                        ignore_patterns=patterns["ignore"], key=lambda sibling: sibling.rfilename))
    if listed and not siblings:
        raise StagingError(f"{uri.text}: none of its {len(listed)} files matches the patterns (allow "
                           f"{patterns['allow']}, ignore {patterns['ignore']}): check allow_patterns and "
                           "ignore_patterns", retryable=False)
    return info, listed, siblings


def _bounded_bar(uri: StorageUri, sibling, into: Path, progress: Progress):
    """huggingface_hub's progress bar for one file, which stops its plain HTTP transfer past the size the Hub lists
    (else what the volume has to spare): the client writes whatever a server sends until the answer ends and
    compares sizes only then, so an endless answer would fill the shared volume. The bar hears of each chunk before
    it is written, and tells ``progress`` (its class's ``told``: how much, for every bar of the file)."""
    from huggingface_hub.utils import tqdm

    if sibling.size is not None:
        limit, past = sibling.size, f"more of {sibling.rfilename} than the {sibling.size} bytes it lists"
    else:
        limit = room(into)
        past = (f"over {amount(limit, None)} of {sibling.rfilename}, which it lists without a size, more than the "
                "shared volume has to spare")

    class Bounded(tqdm):
        received = 0
        told = 0

        def __init__(self, *args, **kwargs):
            self.bounded = kwargs.get("name") == "huggingface_hub.http_get"  # xet checks its chunks by hash itself
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            self.received += n  # n < 0: a retry that starts over takes back what it had counted
            if self.bounded and self.received > limit:
                raise StagingError(f"{uri.text}: the Hub sent {past}: stopped, nothing staged; check HF_ENDPOINT",
                                   retryable=False)
            if self.bounded and n:  # bytes as they come: the rate and the ETA, not one step per file
                progress.add(n)
                Bounded.told += n
            return super().update(n)

    return Bounded


def inside_name(name: object) -> bool:
    """Whether a file name the Hub lists stays inside the directory it is fetched into: relative, no '..', no
    backslash (a Windows separator to some tools), no control character."""
    if not isinstance(name, str) or not name or "\\" in name or any(ord(character) < 32 for character in name):
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and bool(path.parts)


def _verify(uri: StorageUri, path: Path, sibling) -> dict:
    """The file against what the Hub lists for it: its size, and its LFS sha256 or its git blob id."""
    size = path.stat().st_size
    lfs = getattr(sibling, "lfs", None)
    if lfs is not None:
        digest, expected = file_digest(path, hashlib.sha256()), lfs.sha256
    else:
        digest, expected = file_digest(path, hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)), \
            sibling.blob_id
    if (sibling.size is not None and size != sibling.size) or (expected and digest != expected):
        raise StagingError(f"{uri.text}: {sibling.rfilename} arrived damaged ({size} bytes, digest {digest}; the "
                           f"Hub lists {sibling.size} bytes, {expected})", retryable=True)
    return {"bytes": size, "sha256" if lfs is not None else "blob_id": digest}
