"""Property-based checks of unpacking an https:// archive (trainer_stager/fetch_https.py), whose members anyone
serving the file chooses: whatever their names, kinds and sizes, every byte lands inside the staging directory
or the archive is refused with one StagingError (never another exception, never a file outside)."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer_contract import storage
from trainer_stager import fetch_https
from trainer_stager.errors import StagingError

CHECKS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
NAMES = st.lists(st.sampled_from(["a", "b", "..", ".", "", "/", "/etc", "c.txt", "d\\e", "~", "x" * 20]),
                 min_size=1, max_size=4).map("/".join)
MEMBERS = st.lists(st.tuples(NAMES, st.sampled_from(["file", "dir", "symlink", "hardlink", "fifo"]),
                             st.binary(max_size=64), NAMES), min_size=1, max_size=6)


def _tar(members) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        for name, kind, data, target in members:
            info = tarfile.TarInfo(name or "unnamed")
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                         "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            info.linkname = target if kind in ("symlink", "hardlink") else ""
            info.size = len(data) if kind == "file" else 0
            bundle.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return buffer.getvalue()


def _zip(members) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, _, data, _ in members:
            bundle.writestr(name or "unnamed", data)
    return buffer.getvalue()


def _outside(root: Path, before: set[str]) -> set[str]:
    """What appeared under ``root``'s parent outside ``root`` (the sandbox's other files)."""
    now = {str(path) for path in root.parent.rglob("*")}
    return {path for path in now - before if not path.startswith(f"{root}{os.sep}") and path != str(root)}


@CHECKS
@given(members=MEMBERS, kind=st.sampled_from(["tar.gz", "zip"]))
def test_any_archive_unpacks_inside_or_is_refused(tmp_path_factory, members, kind):
    sandbox = tmp_path_factory.mktemp("sandbox")
    into = sandbox / "staging"
    into.mkdir()
    archive = into / f"source.{kind}"
    archive.write_bytes(_tar(members) if kind == "tar.gz" else _zip(members))
    before = {str(path) for path in sandbox.rglob("*")}
    uri = storage.parse(f"https://files.example/source.{kind}", "dataset")
    try:
        fetch_https._unpack(archive, into, uri, limit=1_000_000)
    except StagingError as error:
        assert "\n" not in str(error) and not error.retryable
    assert not _outside(into, before)
    assert not [path for path in into.rglob("*") if path.is_symlink()]  # a tar's links are refused
