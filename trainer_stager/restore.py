"""The stager's last part, with checkpoint.storage_uri: a volume that holds no checkpoint (a new PVC, another
cluster) gets the newest complete one from the bucket before training, where the program resumes from it as from
its own (it verifies it, and refuses it when the run's settings changed). The program is a built-in one (the stage
command's --program: the MNIST worker's without it); its config says where its checkpoints are and how they are
named, and its OUTPUT_DIR and RESUME are read as it reads them. A program of the user's (OwnProgramCheckpoints:
INDEXED_TRAINER_CHECKPOINT_DIR) always resumes from what it finds there: its newest entry is restored, by the name's
order (checkpoint_layout.OWN_PROGRAM), and the decision marked beside the directory.

Index 0 decides and fetches (beside the checkpoints directory, renamed into place); it writes its decision into
OUTPUT_DIR (the marker), which the other indexes wait for, saying what they wait for. A sharded checkpoint of a
program whose ranks restore it themselves (the config's ``restored_by_its_ranks``: every rank fetches a share at
its start, trainer_runtime/checkpoints/bucket_shares.py) is left to them. RESUME=false restores
nothing, everywhere (the worker starts over). Torch-free.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer_contract import checkpoint_layout as layout
from trainer_contract.atomic import atomic_write
from trainer_contract.config_reading import load_config
from trainer_contract.settings import ConfigError
from trainer_contract.storage import MARKER, StorageUri
from trainer_stager import place
from trainer_stager.errors import StagingError, missing_library


def decision_place(environ: Mapping[str, str], program: type) -> Path:
    """Where index 0 marks its decision (and a failure): OUTPUT_DIR, outside the checkpoints themselves."""
    return _config(environ, program).output_dir


def _config(environ: Mapping[str, str], program: type) -> Any:
    """``program``'s variables (a config class of BUILT_IN_PROGRAMS, or OwnProgramCheckpoints) as the program
    reads them."""
    try:
        return load_config(environ, config_class=program)
    except ConfigError as error:
        raise StagingError("; ".join(error.problems), retryable=False) from None


def run(uri: StorageUri, environ: Mapping[str, str], decides: bool, by: str, say: Callable[[str], None],
        retries: Callable[[Callable], Any], program: type) -> None:
    """Restore the newest checkpoint of ``uri`` onto an empty volume where this pod ``decides`` (index 0, or the
    stage Job's), else wait for ``by``'s decision."""
    config = _config(environ, program)
    if not config.resume:
        say(f"RESUME=false: no checkpoint restored from {uri.describe}; training starts from the beginning")
        return
    decision = config.output_dir
    if not decides:
        marker = place.wait_for(decision, f"the newest checkpoint of {uri.describe} (or decide there is none)", say,
                                by=by)
        say(f"{by} decided: {marker.get('outcome', '?')}")
        return
    outcome = _restore(uri, config, decision, say, retries)
    atomic_write(decision / MARKER, json.dumps({"outcome": outcome, "uri": uri.text,
                                                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode())
    say(outcome)


def _restore(uri: StorageUri, config: Any, decision: Path, say: Callable[[str], None],
             retries: Callable[[Callable], Any]) -> str:
    """What index 0 did, in a line."""
    directory, naming = config.checkpoint_dir, config.checkpoint_naming
    on_volume = layout.list_checkpoints(directory, naming)
    if on_volume:
        return f"the volume holds {on_volume[0][1].name}: nothing restored from {uri.describe}"
    (decision / MARKER).unlink(missing_ok=True)  # an earlier decision: the indexes wait for this one
    if importlib.util.find_spec("boto3") is None:
        raise missing_library(uri.describe, "boto3")
    from trainer_stager import checkpoint_bucket as remote

    name = retries(lambda: remote.newest_complete(uri, naming))
    if name is None:
        return f"{uri.describe} holds no complete checkpoint: training starts from the beginning"
    files = retries(lambda: remote.listing_of(uri.below(name)))
    if getattr(config, "restored_by_its_ranks", False) and list(files) != [name]:
        return (f"checkpoint {name} of {uri.describe} is sharded ({len(files)} files): the program's ranks fetch it "
                "at its start, each a share")
    started = time.monotonic()
    progress = place.Progress(decision, f"checkpoint {name}", say)
    retries(lambda: remote.download(uri, name, directory, progress))
    place.progress_file(decision).unlink(missing_ok=True)
    return (f"checkpoint {name} restored from {uri.describe} into {directory} ({progress.done / place.MB:.1f} MB, "
            f"{time.monotonic() - started:.1f} s)")
