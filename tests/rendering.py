"""The installed gen-manifests, run as users run it: its rendered stream for a values file and --set assignments."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import BIN


def gen_manifests(*sets: str, namespace: str | None = None, values: Path | None = None) -> bytes:
    args = [str(BIN / "gen-manifests")] + (["--values", str(values)] if values else [])
    args += ["--set", f"namespace={namespace}"] if namespace else []
    for item in sets:
        args += ["--set", item]
    return subprocess.run(args, capture_output=True, check=True).stdout
