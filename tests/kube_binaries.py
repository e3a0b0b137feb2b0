"""Kubernetes' binaries for the tiers that run a real cluster (controlplane, realnode): from $KUBE_ASSETS where it
is set, else unpacked once from ../shared/k8s/bin/*.xz (checked against its SHA256SUMS) into a cache kept between
runs, with etcd taken from the same directory or from PATH (Debian's etcd-server). Each lookup answers the
directory, or None and one line saying what is missing."""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
from pathlib import Path

from tests.conftest import ROOT

SHARED_K8S = ROOT.parent / "shared" / "k8s"
CACHE = Path(os.environ.get("KUBE_BINARIES_CACHE", "/var/tmp/indexed-trainer-kube-binaries"))
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE = ("kubelet",)


def binaries(names: tuple[str, ...]) -> tuple[Path | None, str]:
    """A directory holding every one of `names`, executable, or None and why not."""
    named = os.environ.get("KUBE_ASSETS")
    directory = Path(named) if named else _unpacked(names)
    if directory is None:
        return None, (f"neither KUBE_ASSETS nor {SHARED_K8S}/bin holds the Kubernetes binaries "
                      "(see tests/controlplane/README.md)")
    if "etcd" in names and not os.access(directory / "etcd", os.X_OK):
        _link_etcd_from_path(directory)
    missing = [name for name in names if not os.access(directory / name, os.X_OK)]
    if missing:
        source = f"KUBE_ASSETS={named}" if named else f"{directory} (from {SHARED_K8S})"
        # Debian's etcd on PATH serves the unpacked binaries only; a KUBE_ASSETS directory holds its own
        hint = " (etcd: install Debian's etcd-server)" if missing == ["etcd"] and not named else ""
        return None, f"{source} lacks {', '.join(missing)}{hint}"
    if shutil.which("kubectl") is None:
        return None, "kubectl is not installed"
    return directory, ""


def _unpacked(names: tuple[str, ...]) -> Path | None:
    """../shared/k8s's binaries unpacked into CACHE (once: a binary whose digest matches is kept)."""
    packed = SHARED_K8S / "bin"
    if not packed.is_dir():
        return None
    digests = _digests(SHARED_K8S / "SHA256SUMS")
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in names:
        source, target = packed / f"{name}.xz", CACHE / name
        if not source.is_file() or (target.is_file() and _sha256(target) == digests.get(name)):
            continue
        partial = target.with_name(f"{name}.{os.getpid()}.partial")  # two tiers may unpack at once
        with lzma.open(source) as reader, partial.open("wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
        if name in digests and _sha256(partial) != digests[name]:
            partial.unlink()
            raise RuntimeError(f"{source} unpacks to a binary whose SHA-256 is not {SHARED_K8S}/SHA256SUMS's")
        partial.chmod(0o755)
        partial.replace(target)
    return CACHE


def _digests(sums: Path) -> dict[str, str]:
    if not sums.is_file():
        return {}
    pairs = (line.split() for line in sums.read_text().splitlines() if line.strip())
    return {Path(name.lstrip("*")).name: digest for digest, name, *_ in pairs}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as reader:
        for block in iter(lambda: reader.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _link_etcd_from_path(directory: Path) -> None:
    found = shutil.which("etcd")
    if found and directory == CACHE:
        (CACHE / "etcd").unlink(missing_ok=True)
        (CACHE / "etcd").symlink_to(found)
