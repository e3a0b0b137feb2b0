"""Write rendered manifests into a directory, all or nothing."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from generator.errors import OutputError
from generator.templating import Manifest
from trainer_contract.atomic import fsync_directory

# Files this tool owns in an output directory: "<order>-<kind>.yaml". Others are never touched.
_OWNED = re.compile(r"^\d+-[a-z]+\.yaml$")


def write_manifests(manifests: list[Manifest], directory: Path) -> list[Path]:
    """Write one file per manifest into ``directory``, replacing an earlier render.

    Every file is written and flushed to a temporary name first and only then renamed into place, so a
    failure leaves the previous files as they were; files of an earlier render that this one no longer
    produces (the claim, once an existing claim is used) are removed.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for manifest in manifests:
            fd, temp_name = tempfile.mkstemp(prefix=f".{manifest.filename}.", suffix=".tmp", dir=directory)
            staged.append((Path(temp_name), directory / manifest.filename))
            with os.fdopen(fd, "wb") as handle:
                handle.write(manifest.text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
        for temp, final in staged:
            os.replace(temp, final)
        produced = {manifest.filename for manifest in manifests}
        for stale in directory.iterdir():
            if _OWNED.match(stale.name) and stale.name not in produced:
                stale.unlink()
        fsync_directory(directory)
    except OSError as exc:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
        where = exc.filename or str(directory)
        raise OutputError(f"--output-dir {directory}: cannot write {where}: {exc.strerror or exc}") from None
    return [directory / manifest.filename for manifest in manifests]
