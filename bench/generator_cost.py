"""gen-manifests start-up against the import floor of its own dependencies, and render time against replicas.

    python -m bench.generator_cost     # these two rows of docs/performance.md alone (python -m bench: all)
"""

from __future__ import annotations

import subprocess
import sys
import time

from bench.stats import BIN, ROOT, alternate, verdict


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
    from generator.resources import default_values_path
    from generator.targets.kubernetes import render_manifests, to_stream
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


def rows(startup: dict, scale: list[dict]) -> list[tuple[str, ...]]:
    """The two rows of the bench's table (bench/cli.py)."""
    times = [row["render_ms"] for row in scale]
    return [
        ("gen-manifests start-up vs importing its dependencies (s)", f"{startup['gen_manifests']:.3f}",
         f"{startup['import_floor']:.3f}", f"{startup['ratio']:.2f}", verdict(startup["ratio"], 1.3, True)),
        ("render time, replicas " + "/".join(str(row["replicas"]) for row in scale) + " (ms)",
         "/".join(f"{t:.1f}" for t in times), "bytes " + "/".join(str(row["bytes"]) for row in scale),
         f"{max(times) / min(times):.2f} max/min", "flat"),
    ]


if __name__ == "__main__":

    for row in rows(startup(15), render_scale(30)):
        print(" | ".join(row))
