"""python -m worker.staging [--program MODULE]: stage the model and dataset the environment names
(INDEXED_TRAINER_MODEL_URI, INDEXED_TRAINER_DATASET_URI; their places MODEL_DIR, DATASET_DIR; or several datasets,
INDEXED_TRAINER_DATASETS, each into DATASET_DIR/<name>), and with
INDEXED_TRAINER_CHECKPOINT_URI restore the newest checkpoint of built-in program MODULE (the MNIST worker's without
it; with INDEXED_TRAINER_CHECKPOINT_DIR, a program of the user's, into that directory) onto a volume that has none
(restore.py), as index 0 or as an index that waits."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainer_contract import datasets as staged_datasets
from trainer_contract import exit_codes
from trainer_contract.checkpoint_layout import CHECKPOINT_DIR_VARIABLE
from trainer_contract.launcher import BUILT_IN_WORKER, STAGE_PROGRAM_FLAG, write_termination_message
from trainer_contract.program_settings import BUILT_IN_PROGRAMS, OwnProgramCheckpoints
from trainer_contract.storage import (
    MODEL_FILES,
    STAGE_JOB_VARIABLE,
    STAGED,
    URI_SOURCE_VARIABLES,
    URI_VARIABLES,
    Role,
    StorageUri,
    StorageUriError,
    parse,
    scrubbed,
    shown,
)
from trainer_stager import place, restore
from trainer_stager.errors import StagingError, exit_code, missing_library, retrying


def say(message: str) -> None:
    """A line of the stage step's log, scrubbed: it may quote a library's error, whose URL holds a query."""
    print(f"stage: {scrubbed(message)}", flush=True)


def index_of(environ: Mapping[str, str]) -> int:
    """This pod's or node's index: the Indexed Job's completion index, Slurm's node id, else 0."""
    return int(environ.get("JOB_COMPLETION_INDEX") or environ.get("SLURM_NODEID") or 0)


# The library each scheme needs (the staging extra: pip install 'indexed-trainer[staging]').
LIBRARIES = {"hf": "huggingface_hub", "s3": "boto3"}


def _fetcher(uri: StorageUri) -> Callable:
    try:
        if uri.scheme == "hf":
            import huggingface_hub  # noqa: F401

            from trainer_stager import fetch_hf

            return fetch_hf.fetch
        if uri.scheme == "s3":
            import boto3  # noqa: F401

            from trainer_stager import fetch_s3

            return fetch_s3.fetch
    except ImportError:
        raise missing_library(uri.describe, LIBRARIES[uri.scheme]) from None
    from trainer_stager import fetch_https

    return fetch_https.fetch


@dataclass(frozen=True)
class Selection:
    """What a source's staging takes of it: a Hub repository's files (None: not a Hub source), and the most bytes
    an https:// archive may unpack to (None: the volume's free space)."""

    patterns: dict[str, list[str] | None] | None = None
    unpack_limit: int | None = None

    @classmethod
    def of_role(cls, environ: Mapping[str, str], role: Role, uri: StorageUri) -> Selection:
        """The role's own: from its variables (initializer.<role>'s keys)."""
        return cls(hub_patterns(environ, role) if uri.scheme == "hf" else None,
                   unpack_limit(environ, role) if uri.is_archive else None)

    @classmethod
    def of_dataset(cls, dataset: staged_datasets.StagedDataset, uri: StorageUri) -> Selection:
        """An entry of initializer.datasets' (DATASETS_VARIABLE)."""
        patterns = {"allow": _listed(dataset.allow_patterns), "ignore": _listed(dataset.ignore_patterns)}
        return cls(patterns if uri.scheme == "hf" else None, dataset.max_unpacked_bytes)


def _listed(patterns: tuple[str, ...] | None) -> list[str] | None:
    return None if patterns is None else list(patterns)


def stage(role: Role, uri: StorageUri, where: Path, environ: Mapping[str, str],
          selection: Selection | None = None) -> None:
    """Index 0's part: nothing when the marker is there, else fetch, verify, publish; one staging of a place at
    a time, whatever job runs it. ``selection``: what of the source (the role's variables say, by default)."""
    with place.held(where, uri.named(role), say):
        _stage(role, uri, where, environ, selection or Selection.of_role(environ, role, uri))


def _stage(role: Role, uri: StorageUri, where: Path, environ: Mapping[str, str], selection: Selection) -> None:
    what = uri.named(role)
    marker = place.marker_of(where)
    patterns = selection.patterns
    if marker is not None:
        if marker.get("uri") not in (uri.source, uri.text):  # the text: an earlier version's marker
            raise StagingError(f"{what}: {where} holds {shown(str(marker.get('uri')))!r}, another source, staged by an earlier "
                               "version, by hand or from the Secret's earlier URI: remove it from the volume (or "
                               "set another storage_uri)", retryable=False)
        if "patterns" in marker and marker["patterns"] != patterns:  # an earlier version's marker: every file
            raise StagingError(f"{what}: {where} was staged with other patterns ({marker['patterns']}, now "
                               f"{patterns}): remove it from the volume to stage it again, or put the patterns back",
                               retryable=False)
        say(f"{what} is already staged at {where} (since {marker.get('staged_at', '?')}): nothing fetched")
        return
    started = time.monotonic()
    fetch = _fetcher(uri)
    if uri.is_archive:
        fetch = functools.partial(fetch, unpack_limit=selection.unpack_limit)
    if patterns is not None:
        fetch = functools.partial(fetch, patterns=patterns)

    def attempt() -> dict:
        temporary = place.temporary_for(where)
        progress = place.Progress(where, what, say)
        try:
            return {"source": fetch(uri, temporary, progress), "temporary": temporary}
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)  # what a failed fetch left holds the volume's space
            raise

    done = retrying(environ, say)(attempt)
    record = {"uri": uri.source, "what": what, "staged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **done["source"]}
    place.publish(done["temporary"], where, record)
    seconds = time.monotonic() - started
    left_out = done["source"].get("left_out") or {}
    say(f"{what} staged at {where} in {seconds:.1f} s" + (
        f"; {left_out['files']} files of the repository ({left_out['bytes']} bytes) left out by the patterns "
        f"{done['source']['patterns']}" if left_out.get("files") else ""))


def stall_bound(environ: Mapping[str, str]) -> float:
    """How long a waiting index waits for index 0's progress to advance (place.STALL_VARIABLE, else
    place.STALL_SECONDS)."""
    text = environ.get(place.STALL_VARIABLE, "").strip()
    if not text:
        return place.STALL_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:  # also NaN
        raise StagingError(f"{place.STALL_VARIABLE}={text[:200]!r}: write a positive number of seconds (e.g. 1800)",
                           retryable=False)
    return seconds


def hub_patterns(environ: Mapping[str, str], role: Role) -> dict[str, list[str] | None]:
    """Which files of a Hub repository ``role`` fetches (its allow_patterns and ignore_patterns variables); a
    model's allow-list defaults to MODEL_FILES, what from_pretrained loads."""
    allow = _patterns(environ, STAGED[role].allow_patterns)
    return {"allow": list(MODEL_FILES) if allow is None and role == "model" else allow,
            "ignore": _patterns(environ, STAGED[role].ignore_patterns)}


def _patterns(environ: Mapping[str, str], name: str) -> list[str] | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(item, str) and item and "\0" not in item for item in value):
        raise StagingError(f"{name}={text[:200]!r}: write a JSON list of glob patterns (e.g. [\"*.safetensors\", "
                           "\"*.json\"])", retryable=False)
    return value


def unpack_limit(environ: Mapping[str, str], role: Role) -> int | None:
    """What an archive of ``role`` may unpack to (its unpack_limit variable), or None (the volume's free space)."""
    name = STAGED[role].unpack_limit
    text = environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) == 0:
        raise StagingError(f"{name}={text!r}: write a positive number of bytes (e.g. 5000000000)", retryable=False)
    return int(text)


def unexpected(error: Exception) -> str:
    """One line for a fault of no kind the stager names (what a traceback would have said last), scrubbed."""
    return scrubbed(f"unexpected {type(error).__name__}: {error}".replace("\n", " "))[:2000]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # only a render writes the command: a wrong one is bad configuration (78)
        raise StagingError(f"{self.prog}: {message}", retryable=False)


def program_of(argv: list[str] | None, environ: Mapping[str, str] | None = None) -> type:
    """The config class of the program whose checkpoints are restored: the built-in one the stage command's
    --program names, or with CHECKPOINT_DIR_VARIABLE (rendered for a program of the user's only) the user's."""
    parser = _Parser(prog="python -m worker.staging", description="Stage the model and dataset onto the shared "
                     "volume, and restore the newest checkpoint from checkpoint.storage_uri onto a volume with none.")
    parser.add_argument(STAGE_PROGRAM_FLAG, dest="program", choices=list(BUILT_IN_PROGRAMS),
                        help=f"the built-in program whose checkpoints are restored (default: {BUILT_IN_WORKER}; with "
                             f"{CHECKPOINT_DIR_VARIABLE}, a program of your own's, into that directory)")
    program = parser.parse_args(argv).program
    if (environ or {}).get(CHECKPOINT_DIR_VARIABLE):
        if program is not None:
            raise StagingError(f"python -m worker.staging: {STAGE_PROGRAM_FLAG} {program} restores a built-in "
                               f"program's checkpoints, and {CHECKPOINT_DIR_VARIABLE} names a program of your own's "
                               "directory: a render sets one of them only", retryable=False)
        return OwnProgramCheckpoints
    return BUILT_IN_PROGRAMS[program or BUILT_IN_WORKER]


@dataclass(frozen=True)
class Stager:
    """Whether this pod fetches (index 0, or the stage Job's pod) or waits, and who fetches, as the waiting say it."""

    fetches: bool
    by: str

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> Stager:
        """Index 0 fetches, the other indexes wait for it; where the stage step is a Job of its own
        (initializer.separate_job: STAGE_JOB_VARIABLE names it, in the training pods) every index waits for it."""
        job = environ.get(STAGE_JOB_VARIABLE, "").strip()
        if job:
            return cls(False, f"Job {job}")
        return cls(index_of(environ) == 0, "index 0")

    def wait(self, where: Path, what: str, environ: Mapping[str, str]) -> None:
        marker = place.wait_for(where, what, say, stall=stall_bound(environ), by=self.by)
        say(f"{what} staged at {where} by {self.by} ({marker.get('staged_at', '?')})")


def run(environ: Mapping[str, str], program: type) -> int:
    """Stage, then restore ``program``'s newest checkpoint (a config class of BUILT_IN_PROGRAMS, or
    OwnProgramCheckpoints) when asked."""
    stager = Stager.of(environ)
    for role in STAGED:
        text = environ.get(URI_VARIABLES[role])
        if not text:
            continue
        uri = parse(text, role, known_as=environ.get(URI_SOURCE_VARIABLES[role]))
        where = Path(environ.get(STAGED[role].path) or uri.staged_path(os.getcwd(), role))
        if uri.scheme == "path":
            if where != Path(uri.staged_path(os.getcwd(), role)):  # a path from a Secret (storage_uri_secret)
                raise StagingError(f"{uri.named(role)}: a path on the shared volume, while {STAGED[role].path} is "
                                   f"{where}: give the path as storage_uri itself (no Secret needed)",
                                   retryable=False)
            if not where.exists():
                raise StagingError(f"{uri.named(role)}: no such path on the shared volume; copy it there, or "
                                   "give an hf://, s3:// or https:// URI to stage", retryable=False)
            say(f"{role} is read from {where}, already on the shared volume")
        elif stager.fetches:
            with failure_recorded(where):
                stage(role, uri, where, environ)
        else:
            stager.wait(where, uri.named(role), environ)
    text = environ.get(staged_datasets.DATASETS_VARIABLE)
    if text:
        stage_datasets(text, environ, stager)
    text = environ.get(URI_VARIABLES["checkpoint"])
    if text:
        with failure_recorded(restore.decision_place(environ, program)) if stager.fetches else \
                contextlib.nullcontext():
            restore.run(parse(text, "checkpoint"), environ, stager.fetches, stager.by, say, retrying(environ, say),
                        program)
    return exit_codes.OK


def stage_datasets(text: str, environ: Mapping[str, str], stager: Stager) -> None:
    """initializer.datasets (DATASETS_VARIABLE's ``text``): each into DATASET_DIR/<name>, by the pod that fetches;
    the others wait for each."""
    base = environ.get(STAGED["dataset"].path)
    if not base:
        raise StagingError(f"{staged_datasets.DATASETS_VARIABLE} is set and {STAGED['dataset'].path} is not: a render "
                           "sets both", retryable=False)
    for dataset in staged_datasets.parsed(text):
        uri = parse(dataset.storage_uri, "dataset")
        if uri.scheme == "path":
            raise StagingError(f"{staged_datasets.DATASETS_VARIABLE}: dataset {dataset.name!r} is a path on the shared "
                               "volume, which is not staged: give an hf://, s3:// or https:// URI", retryable=False)
        where = Path(base) / dataset.name
        if stager.fetches:
            with failure_recorded(where):
                stage("dataset", uri, where, environ, Selection.of_dataset(dataset, uri))
        else:
            stager.wait(where, uri.named("dataset"), environ)


@contextlib.contextmanager
def failure_recorded(where: Path) -> Iterator[None]:
    """Index 0's failure is recorded at ``where``, so that the indexes waiting for it stop too."""
    try:
        yield
    except Exception as error:  # any: an index waiting for a marker that never comes would wait forever
        place.record_failure(where, str(error) if isinstance(error, (StagingError, OSError)) else unexpected(error),
                             exit_code(error))
        raise


def main(environ: Mapping[str, str] | None = None, argv: list[str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    try:
        return run(environ, program_of(argv, environ))
    except place.LeaderFailed as error:  # a victim: index 0's own failure is the one counted
        say(f"index 0 failed to stage: {error}; exiting {exit_codes.PEER_LOST}")
        write_termination_message(f"exit {exit_codes.PEER_LOST}: index 0 failed to stage: {error}")
        return exit_codes.PEER_LOST
    except place.LeaderStalled as error:  # counted here: a hung index 0 exits with no code of its own
        say(f"error: {error}; exiting {exit_codes.STALLED}")
        write_termination_message(f"exit {exit_codes.STALLED}: staging stalled: {error}")
        return exit_codes.STALLED
    except (StorageUriError, StagingError) as error:
        code = exit_code(error)
        say(f"error: {error}; exiting {code}")
        write_termination_message(f"exit {code}: staging failed: {error}")
        return code
    except OSError as error:  # the shared volume: full, or not writable by the pod's user
        fix = ("raise shared_volume.size or free space there" if error.errno in (errno.ENOSPC, errno.EDQUOT) else
               "check that the pod's user may write there (security.fs_group)")
        message = f"the shared volume: {error.strerror or error} ({error.filename or ''}): {fix}"
        say(f"error: {message}; exiting {exit_codes.BAD_CONFIG}")
        write_termination_message(f"exit {exit_codes.BAD_CONFIG}: staging failed: {message}")
        return exit_codes.BAD_CONFIG
    except Exception as error:  # a fault nothing above names: still one line and a contract code, no traceback
        code = exit_code(error)
        say(f"error: {unexpected(error)}; exiting {code}")
        write_termination_message(f"exit {code}: staging failed: {unexpected(error)}")
        return code


if __name__ == "__main__":
    sys.exit(main())
