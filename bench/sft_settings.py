"""The rows of python -m bench.transformers that measure worker.sft's TRL settings against themselves, on this
machine's CPUs (world size 2, gloo), the same random Llama and chat data as bench/sft.py:

- gradient accumulation: BATCH_SIZE 4 x GRADIENT_ACCUMULATION_STEPS 2 against BATCH_SIZE 8, fp32, no dropout: the
  loss of every optimizer step (metrics.jsonl), the largest relative difference (goal <= 1e-3: the same trajectory,
  to float rounding), and the peak resident memory per rank (goal <= 1: half the activations at a time).
- the token cache: a restart's seconds from launch to the first training step with the cache on the volume against
  without it (the same OUTPUT_DIR, its token-cache/ removed), alternating, medians (goal < 1).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.sft import RECIPE
from bench.stats import clean_env, launch_until, launched, launcher_command, verdict

QUIET = {"LOG_INTERVAL": "100000", "CHECKPOINT_EVERY_STEPS": "0", "CHECKPOINT_EVERY_SECONDS": "0",
         "TENSORBOARD": "false", "SAMPLE_PROMPTS": ""}


def sizes(size: str) -> dict:
    if size == "quick":
        return {"hidden": 32, "layers": 2, "train": 64, "cache_train": 256}
    return {"hidden": 256, "layers": 4, "train": 512, "cache_train": 20000}


def accumulation(model: Path, data: Path, scratch: Path, world: int) -> dict:
    """Every step's loss and the peak memory per rank, BATCH_SIZE 8 against 4 x 2 accumulated."""
    runs = {}
    for name, batch, steps in (("larger", "8", "1"), ("accumulated", "4", "2")):
        output = Path(tempfile.mkdtemp(dir=scratch))
        exact = {**RECIPE, "PRECISION": "fp32", "LORA_DROPOUT": "0", "BATCH_SIZE": batch,
                 "GRADIENT_ACCUMULATION_STEPS": steps}
        launched("worker.sft", [], clean_env(**{**exact, **QUIET, "LOG_INTERVAL": "1"}, EPOCHS=1, MODEL_DIR=model,
                                             DATASET_DIR=data, OUTPUT_DIR=output), world)
        records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
        peaks = [float(log.read_text().splitlines()[-1].split(" peak ")[1].split()[0])
                 for log in (output / "logs").glob("usage-rank*.log")]
        runs[name] = {"losses": [record["loss"] for record in records if "perplexity" not in record],
                      "peak_mib": max(peaks)}
    larger, accumulated = runs["larger"]["losses"], runs["accumulated"]["losses"]
    assert len(larger) == len(accumulated) > 0, (len(larger), len(accumulated))
    return {"steps": len(larger), "largest_relative_difference": max(
        abs(a - b) / max(abs(a), 1e-12) for a, b in zip(larger, accumulated, strict=True)),
        "larger_peak_mib": runs["larger"]["peak_mib"], "accumulated_peak_mib": runs["accumulated"]["peak_mib"]}


def restart_seconds(model: Path, data: Path, output: Path, world: int, cached: bool) -> float:
    """Seconds from launch to rank 0's first training step in ``output``, with its token cache or without."""
    if not cached:
        shutil.rmtree(output / "token-cache", ignore_errors=True)
    command = launcher_command(world, "worker.sft")
    env = clean_env(**RECIPE, **QUIET, EPOCHS=1, MODEL_DIR=model, DATASET_DIR=data, OUTPUT_DIR=output)
    seconds, lines = launch_until(command, env, lambda line: "Rank 0: training from step 0" in line, timeout=900)
    said = "".join(lines)
    assert seconds != float("inf"), said[-2000:]
    assert ("the tokenized data is read from" in said) == cached, said[-2000:]  # the row measures what it says
    return seconds


def token_cache(model: Path, data: Path, scratch: Path, world: int, repeats: int) -> dict:
    output = Path(tempfile.mkdtemp(dir=scratch))
    restart_seconds(model, data, output, world, cached=False)  # the first start writes the cache
    samples: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(repeats):
        samples["without"].append(restart_seconds(model, data, output, world, cached=False))
        samples["with"].append(restart_seconds(model, data, output, world, cached=True))
    return {name: statistics.median(values) for name, values in samples.items()}


def measure(size_name: str, repeats: int, scratch: Path, log, world: int) -> dict:
    from testbed.sft_data import make_chat_data, make_model

    size = sizes(size_name)
    model = make_model(scratch / "settings-llama", hidden=size["hidden"], layers=size["layers"])
    log("gradient accumulation: BATCH_SIZE 4 x 2 against 8, every step's loss...")
    data = make_chat_data(scratch / "settings-chat", train=size["train"], validation=32)
    accumulated = accumulation(model, data, scratch, world)
    log(f"the token cache: a restart's time to its first step with it and without, {repeats} rounds...")
    many = make_chat_data(scratch / "settings-many", train=size["cache_train"], validation=256)
    return {"sft_settings": {"world": world, "train": size["train"], "cache_train": size["cache_train"],
                             "accumulation": accumulated, "token_cache": token_cache(model, many, scratch, world,
                                                                                      repeats)}}


def rows(r: dict) -> list[tuple[str, ...]]:
    settings = r["sft_settings"]
    steps, world = settings["accumulation"], settings["world"]
    memory = steps["accumulated_peak_mib"] / steps["larger_peak_mib"]
    cache = settings["token_cache"]
    faster = cache["with"] / cache["without"]
    difference = steps["largest_relative_difference"]
    return [(f"SFT loss per step, BATCH_SIZE 4 x GRADIENT_ACCUMULATION_STEPS 2 vs 8, ws {world}, fp32: largest "
             f"relative difference over {steps['steps']} steps", "4 x 2", "8", f"{difference:.1e}",
             verdict(difference, 1e-3, True)),
            ("SFT peak resident memory per rank, 4 x 2 vs 8 (MiB)", f"{steps['accumulated_peak_mib']:.0f}",
             f"{steps['larger_peak_mib']:.0f}", f"{memory:.2f}", verdict(memory, 1, True)),
            (f"SFT restart's launch to first step, {settings['cache_train']:,} conversations, ws {world} (s)",
             f"{cache['with']:.1f} (token cache)", f"{cache['without']:.1f} (tokenized again)", f"{faster:.2f}",
             verdict(faster, 1, True))]
