"""Getting the four MNIST files onto disk, verified and atomically; no torch here.

The files land in DATA_DIR/MNIST/raw/ (where torchvision.datasets.MNIST reads them) only after every one was
downloaded into a temporary directory beside it, checked against its checksum, decompressed and checked
for a complete IDX structure. Then a marker recording each file's SHA-256 is written. A crash at any point
leaves either the previous state or temporary files that nothing reads: torchvision's own existence check
would accept a half-extracted set, this one does not.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import time
import urllib.error
from pathlib import Path

from trainer_contract.atomic import atomic_write
from trainer_contract.digests import file_digest
from trainer_contract.downloads import DownloadError, TooLarge, copy_bounded, http_get
from trainer_contract.volume_notes import read_json_note
from worker.mnist import idx

# File names and MD5s of the official .gz archives, as torchvision publishes them (torchvision.datasets.MNIST
# .resources; kept here so that checking the data never imports torch).
OFFICIAL_ARCHIVES = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
OFFICIAL_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
MARKER = ".verified.json"
# An archive or a file it holds: far above MNIST's largest (47 MB unpacked) and EMNIST's (550 MB), which a mirror
# may serve in the same format; a mirror's endless answer or a gzip bomb stops here, not at a full volume.
MAX_FILE_BYTES = 1 << 30


class DataError(Exception):
    """The dataset could not be obtained or failed verification (exit_codes.DATA_UNAVAILABLE)."""


def raw_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "MNIST" / "raw"


def check_idx(path: Path) -> int:
    """Check that ``path`` is a complete IDX file of unsigned bytes; return its item count."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        try:
            shape = idx.read_header(handle)
            idx.check_size(size, shape)
        except idx.IdxError as exc:
            raise DataError(f"{path.name}: {exc}" if size >= 4 else f"{path.name}: truncated ({size} bytes)") from None
    if len(shape) == 3 and shape[1:] != (28, 28):
        raise DataError(f"{path.name}: images are {shape[1]}x{shape[2]}, not 28x28")
    return shape[0]


def check_raw_files(directory: Path) -> dict[str, int]:
    """Check the four decompressed files; return their item counts. Raises DataError naming the first bad one."""
    counts = {}
    for archive in OFFICIAL_ARCHIVES:
        name = archive.removesuffix(".gz")
        path = directory / name
        if not path.is_file():
            raise DataError(f"{name}: missing from {directory}")
        counts[name] = check_idx(path)
    for split in ("train", "t10k"):
        images, labels = counts[f"{split}-images-idx3-ubyte"], counts[f"{split}-labels-idx1-ubyte"]
        if images != labels:
            raise DataError(f"{split}: {images} images but {labels} labels")
    marker = directory / MARKER
    if marker.exists():  # a file on the volume: read bounded, and only the four names it may vouch for are looked up
        recorded = (read_json_note(marker) or {}).get("sha256")
        if not isinstance(recorded, dict):
            raise DataError(f"{marker}: not a marker of this worker's; remove it (the files are checked again)")
        for name in counts:
            if name in recorded and file_digest(directory / name, "sha256") != recorded[name]:
                raise DataError(f"{name}: its SHA-256 no longer matches the one recorded when it was downloaded")
    return counts


def read_checksums(path: Path) -> dict[str, tuple[str, str]]:
    """A sha256sum-format file ('<hex>  <name>') -> {archive name: ("sha256", hex)}."""
    table = {}
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"MNIST_CHECKSUMS: cannot read {path} ({exc.strerror if isinstance(exc, OSError) else exc}); "
                        "point it at a sha256sum-format file the pod can see") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64:
            raise DataError(f"{path}:{number}: expected '<sha256>  <file name>'")
        table[parts[1].lstrip("*")] = ("sha256", parts[0].lower())
    missing = [name for name in OFFICIAL_ARCHIVES if name not in table]
    if missing:
        raise DataError(f"{path}: no checksum for {', '.join(missing)}")
    return table


def download(data_dir: Path, mirrors: list[str], checksums: dict[str, tuple[str, str]] | None = None,
             timeout: float = 60.0, log=print, limit: int = MAX_FILE_BYTES) -> None:
    """Download, verify and install the four files into raw_dir(data_dir), all or nothing; each archive and each
    file it holds at most ``limit`` bytes."""
    target = raw_dir(data_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    expected = checksums or {name: ("md5", digest) for name, digest in OFFICIAL_ARCHIVES.items()}
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=target.parent))
    try:
        digests = {}
        for archive in OFFICIAL_ARCHIVES:
            errors = []
            for mirror in mirrors:
                url = mirror + archive
                compressed = staging / archive
                started = time.monotonic()
                try:
                    http_get(url, compressed, timeout, lambda announced: limit)
                    kind, want = expected[archive]
                    got = file_digest(compressed, kind)
                    if got != want:
                        raise DataError(f"{url}: {kind} {got} does not match the expected {want}")
                    raw = staging / archive.removesuffix(".gz")
                    with gzip.open(compressed) as source:
                        copy_bounded(source, raw, limit, "its content unpacked")
                    check_idx(raw)
                except (OSError, EOFError, urllib.error.URLError, DataError, DownloadError) as exc:
                    needs = ", which no MNIST-format file needs" if isinstance(exc, TooLarge) else ""
                    errors.append(f"{url}: {exc}{needs}")
                    continue
                finally:
                    compressed.unlink(missing_ok=True)
                digests[raw.name] = file_digest(raw, "sha256")
                log(f"downloaded {url} ({raw.stat().st_size} bytes, {time.monotonic() - started:.1f} s)")
                break
            else:
                raise DataError(f"could not get {archive}: " + "; ".join(errors))
        for name in digests:
            with (staging / name).open("rb") as handle:
                os.fsync(handle.fileno())
        target.mkdir(exist_ok=True)
        (target / MARKER).unlink(missing_ok=True)  # the old marker must never vouch for new files
        for name in digests:
            os.replace(staging / name, target / name)
        _write_marker(target, digests)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_marker(directory: Path, digests: dict[str, str]) -> None:
    atomic_write(directory / MARKER, json.dumps({"sha256": digests}, indent=2, sort_keys=True).encode())
