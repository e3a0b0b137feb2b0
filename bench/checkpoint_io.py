"""python -m bench.checkpoint_io: what a checkpoint of a large state costs, and how fast it moves, side by side in one
run on this machine (world size 2, gloo):

    python -m bench.checkpoint_io              # the figures of docs/performance.md ("Checkpoints and data at scale")
    python -m bench.checkpoint_io --quick      # a tiny model and one round (the test suite runs this)
    python -m bench.checkpoint_io --only save  # one group (save, bucket, staging; --only again for more)

- save: python -m worker.sft, a full fine-tune (LORA_RANK=0) under fsdp of a random ~100 M-parameter Llama
  (testbed/sft_data.py), MAX_STEPS steps with a checkpoint every CHECKPOINT_EVERY_STEPS against none in between:
  the training seconds a save costs (summary.json's train_seconds, the difference over the saves), asynchronous
  (CHECKPOINT_ASYNC, the default) and synchronous, against the floor of a synchronous verified save of the same
  bytes: each file of the checkpoint written from memory, hashed (SHA-256) as it is written and fsynced, on the
  same disk, alone. Target: an asynchronous save costs at most 0.5 of the floor (the write beside the training
  still takes CPU here, where both ranks' training uses both cores). And the bytes rank 0 hashes for a checkpoint
  (its log line) against the checkpoint's: target at most 1/world of the shards plus the files only rank 0 writes
  (.metadata, extra.pt).
- bucket: the mirror's upload, a restore and S3 staging against boto3's TransferManager on the same moto server
  (bench/bucket_io.py); target at least 0.9 of its throughput.
- staging: the Hub and https staging against huggingface_hub's snapshot_download(max_workers=8) and one stream
  (bench/staging_io.py); target at least 0.9.

Runs alternate (a, b, c, a, b, c, ...) and each figure is a median.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.stats import alternate_samples, clean_env, in_scratch, launched, render_rows, say_machine, verdict

WORLD = 2
MB = 1_000_000
SIZES = {
    # ~100 M parameters (9 x hidden^2 per layer): 1.2 GB of fp32 weights and AdamW's two moments a checkpoint
    "full": {"hidden": 1024, "layers": 10, "steps": 12, "every": 3, "repeats": 3, "megabytes": 256},
    "quick": {"hidden": 64, "layers": 2, "steps": 4, "every": 2, "repeats": 1, "megabytes": 6},
}
SAVE_TARGET = 0.5
HASHED_SLACK = 1.05  # FSDP's shards of odd-sized dimensions are a little uneven
TRANSFER_TARGET = 0.9
GROUPS = ("save", "bucket", "staging")
RECIPE = {"LORA_RANK": "0", "STRATEGY": "fsdp", "BATCH_SIZE": "1", "MAX_SEQ_LENGTH": "32", "LEARNING_RATE": "0.0001",
          "PRECISION": "fp32", "OMP_NUM_THREADS": "1", "LOG_INTERVAL": "100000", "TENSORBOARD": "false",
          "SAMPLE_PROMPTS": "", "EVAL_SAMPLES": "4", "CHECKPOINT_EVERY_SECONDS": "0", "KEEP_CHECKPOINTS": "1"}
HASHED = re.compile(r"Rank 0: checkpoint (step-\d+\.ckpt) written \([^)]*rank 0 hashed ([\d.]+) of ([\d.]+) MB\)")


def sft_run(model: Path, data: Path, steps: int, every: int, asynchronous: bool) -> dict:
    """One run of MAX_STEPS ``steps``, a checkpoint every ``every`` steps (0: the last step's alone): its training
    seconds, its saves and rank 0's hashing line of each."""
    output = Path(tempfile.mkdtemp())
    result = launched("worker.sft", [], clean_env(**RECIPE, MAX_STEPS=steps, CHECKPOINT_EVERY_STEPS=every,
                                                  CHECKPOINT_ASYNC=str(asynchronous).lower(), MODEL_DIR=model,
                                                  DATASET_DIR=data, OUTPUT_DIR=output), WORLD)
    hashed = [(float(here), float(total)) for _, here, total in HASHED.findall(result.stdout)]
    checkpoint = max((output / "checkpoints").glob("step-*.ckpt"))
    return {"seconds": json.loads((output / "summary.json").read_text())["train_seconds"], "hashed": hashed,
            "files": {path.name: path.stat().st_size for path in checkpoint.iterdir()}}


def floor_seconds(sizes: dict[str, int], directory: Path) -> float:
    """A synchronous verified save of files of ``sizes`` bytes, alone: each written from memory, hashed as it is
    written, fsynced; the directory fsynced."""
    chunk = os.urandom(8 * 2**20)
    began = time.perf_counter()
    target = Path(tempfile.mkdtemp(dir=directory))
    for name, size in sizes.items():
        digest = hashlib.sha256()
        with open(target / name, "wb") as handle:
            left = size
            while left > 0:
                part = memoryview(chunk)[:min(left, len(chunk))]
                digest.update(part)
                handle.write(part)
                left -= len(part)
            handle.flush()
            os.fsync(handle.fileno())
    descriptor = os.open(target, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    took = time.perf_counter() - began
    for path in target.iterdir():
        path.unlink()
    target.rmdir()
    return took


def measure_save(size: dict, repeats: int, log) -> dict:
    from testbed.sft_data import make_chat_data, make_model

    work = Path(tempfile.mkdtemp())
    model = make_model(work / "model", hidden=size["hidden"], layers=size["layers"])
    data = make_chat_data(work / "data", train=256, validation=16)
    parameters = sum(os.path.getsize(path) for path in model.glob("*.safetensors")) / 4
    log(f"save: a {parameters / 1e6:.1f} M-parameter Llama, {size['steps']} steps, a save every {size['every']}")
    steps, every = size["steps"], size["every"]
    saves = steps // every - (1 if steps % every == 0 else 0)  # those between: the last step's is in every run
    runs: dict[str, list[dict]] = {}

    def run(name: str, every_steps: int, asynchronous: bool):
        def once() -> float:
            outcome = sft_run(model, data, steps, every_steps, asynchronous)
            runs.setdefault(name, []).append(outcome)
            return outcome["seconds"]
        return once

    samples = alternate_samples({"none": run("none", 0, True), "async": run("async", every, True),
                                 "sync": run("sync", every, False)}, repeats)
    files = runs["async"][0]["files"]
    floors = [floor_seconds(files, work) for _ in range(repeats)]
    cost = {mode: statistics.median((with_saves - without) / saves for with_saves, without
                                    in zip(samples[mode], samples["none"], strict=True)) for mode in ("async", "sync")}
    here, total = max(runs["async"][0]["hashed"])
    only_rank0 = sum(size for name, size in files.items() if name in (".metadata", "extra.pt")) / MB
    shards = sum(size for name, size in files.items() if name.startswith("__")) / MB
    return {"parameters_m": round(parameters / 1e6, 1), "checkpoint_mb": round(sum(files.values()) / MB, 1),
            "saves": saves, "train_seconds": {mode: statistics.median(values) for mode, values in samples.items()},
            "async_cost_s": round(cost["async"], 3), "sync_cost_s": round(cost["sync"], 3),
            "floor_s": round(statistics.median(floors), 3),
            "rank0_hashed_mb": here, "hashed_total_mb": total, "rank0_share_mb": round(shards / WORLD + only_rank0, 1)}


def rows(results: dict) -> list[tuple[str, ...]]:
    table = [("figure", "ours", "baseline", "ratio", "target")]
    save = results.get("save")
    if save:
        floor = save["floor_s"]
        for mode in ("async", "sync"):
            cost = save[f"{mode}_cost_s"]
            table.append((f"training seconds a save costs, {mode} ({save['checkpoint_mb']} MB, {save['parameters_m']} M "
                          "parameters, fsdp ws 2)", f"{cost:.2f} s", f"floor {floor:.2f} s", f"{cost / floor:.2f}",
                          verdict(cost / floor, SAVE_TARGET, at_most=True) if mode == "async" else "(reference)"))
        share = save["rank0_hashed_mb"] / save["rank0_share_mb"]
        table.append(("bytes rank 0 hashes a save", f"{save['rank0_hashed_mb']:.1f} MB",
                      f"1/{WORLD} + its own {save['rank0_share_mb']:.1f} MB of {save['hashed_total_mb']:.1f}",
                      f"{share:.2f}", verdict(share, HASHED_SLACK, at_most=True)))
    for row in results.get("bucket", []) + results.get("staging", []):
        table.append((row["phase"], f"{row['ours_mb_s']:.0f} MB/s", f"{row['baseline_mb_s']:.0f} MB/s",
                      f"{row['ratio']:.2f}", verdict(row["ratio"], row.get("target", TRANSFER_TARGET), at_most=False)))
    return table


@in_scratch
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.checkpoint_io", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny model and one round, to check it runs")
    parser.add_argument("--repeats", type=int, help="alternating rounds per figure (median)")
    parser.add_argument("--only", choices=GROUPS, action="append", help="a group of rows (again for more)")
    parser.add_argument("--megabytes", type=int, help="the bucket's and staging's bytes (default: 256, quick 6)")
    parser.add_argument("--json", type=Path, help="also write the results there")
    args = parser.parse_args(argv)
    size = SIZES["quick" if args.quick else "full"]
    repeats = args.repeats or size["repeats"]
    groups = args.only or GROUPS
    log = lambda line: print(f"bench: {line}", file=sys.stderr)  # noqa: E731
    results: dict = {}
    if "save" in groups:
        results["save"] = measure_save(size, repeats, log)
    megabytes = args.megabytes or size["megabytes"]
    if "bucket" in groups:
        from bench import bucket_io

        results["bucket"] = bucket_io.measure(Path(tempfile.mkdtemp()), megabytes, repeats)
    if "staging" in groups:
        from bench import staging_io

        results["staging"] = staging_io.measure(Path(tempfile.mkdtemp()), megabytes, repeats)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(render_rows(rows(results)))
    say_machine()
    return 0


if __name__ == "__main__":
    sys.exit(main())
