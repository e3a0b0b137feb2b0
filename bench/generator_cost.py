"""gen-manifests start-up against the import floor of its own dependencies, and render time against replicas."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.stats import BIN, ROOT, alternate


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def startup(repeats: int) -> dict:
    medians = alternate({
        "gen_manifests": lambda: _wall([str(BIN / "gen-manifests")]),
        "import_floor": lambda: _wall([sys.executable, "-c", "import yaml, jinja2, click, jsonschema"]),
    }, repeats)
    return {**medians, "ratio": medians["gen_manifests"] / medians["import_floor"]}


def render_scale(repeats: int, sizes=(1, 10, 100, 1000, 10000)) -> list[dict]:
    from generator.targets.kubernetes import render_manifests, to_stream
    from generator.resources import default_values_path
    from generator.validation import validate_values
    from generator.values import apply_set, resolve_values

    base = resolve_values(default_values_path(), [])
    rows = []
    for replicas in sizes:
        values = apply_set(base, f"replicas={replicas}", as_string=False)

        def once():
            started = time.perf_counter()
            text = to_stream(render_manifests(validate_values(values)))
            once.size = len(text.encode())
            return time.perf_counter() - started

        seconds = alternate({"render": once}, repeats)["render"]
        rows.append({"replicas": replicas, "render_ms": seconds * 1000, "bytes": once.size})
    return rows
