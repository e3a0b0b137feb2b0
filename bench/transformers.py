"""python -m bench.transformers: the seeds' transformer workloads, world size 2 on this machine (--world), side by side
in one run (alternating, medians):

    python -m bench.transformers                     # the figures of docs/performance.md
    python -m bench.transformers --quick             # a tiny model and a few steps (the test suite runs this:
                                                     # finetune and sft through bench/gpu.sh --dry-run, at ws 1)
    python -m bench.transformers --only sft          # one group of rows (--only again for more)
    python -m bench.transformers --size gpu --world 1   # bench/gpu.sh's: larger models, one process per GPU

- tokens/s per process: python -m worker.finetune (DDP, bf16 autocast) against Hugging Face's Trainer
  (bench/hf_trainer_baseline.py) on the same random BERT, the same texts and the same recipe; training time only,
  evaluations left out (both evaluate every epoch). Goal >= 1.
- time to a fixed macro F1: the same runs, seconds from the training's start to the first evaluation at or above
  the target. Goal <= 1.
- peak memory per rank: python -m worker.qa under STRATEGY=fsdp against ddp (fp32), a larger BERT, growth over
  the same program with a 2-layer, 32-wide BERT (what torch, transformers and Lightning hold before any model);
  measured once (a peak of resident memory does not vary with the machine's load). Goal -> 1/2 at world size 2.
- supervised fine-tuning: python -m worker.sft against TRL's SFTTrainer (bench/sft.py): tokens/s per process
  (goal >= 1), peak memory per rank (goal <= 1), evaluation loss after the same tokens (goal: within 2%); and the
  gradient accumulation against the larger batch and a restart with the token cache against without it
  (bench/sft_settings.py); and the host memory a node's processes take to load and shard a Llama under fsdp, the
  weights read by rank 0 alone against every rank reading them (bench/shared_load.py; goal <= 1).

The models and data are made here (testbed/qa_data.py, testbed/text_data.py, testbed/sft_data.py: random BERTs
and Llamas, learnable texts, questions and chats): nothing is downloaded. Every process trains on its own GPU where
CUDA is there (NCCL), on the CPU (gloo) otherwise; each run's largest peak CUDA memory per rank is recorded
(``cuda_peak_mib``, None on the CPU).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import tempfile
from pathlib import Path

from bench import sft, sft_settings, shared_load
from bench.stats import (
    clean_env,
    in_scratch,
    launched,
    median_or_none,
    render_rows,
    usage_log_cuda_peak,
    verdict,
    written_cuda_peak,
)

WORLD = 2  # processes per run: this 2-core machine's figures; bench/gpu.sh passes its GPU count
SIZES = ("quick", "full", "gpu")
# The sections measure() runs, and --only's groups of them: sft's rows with the two sections of its group that follow
SECTIONS = ("finetune", "memory", "sft", "settings", "load")
GROUPS = {"finetune": ("finetune",), "memory": ("memory",), "sft": ("sft", "settings", "load"),
          "settings": ("settings",), "load": ("load",)}
RECIPE = {"BATCH_SIZE": "16", "LEARNING_RATE": "0.001", "PRECISION": "bf16", "MAX_SEQ_LENGTH": "64",
          "OMP_NUM_THREADS": "1"}


def sizes(size: str) -> dict:
    if size == "quick":
        return {"hidden": 32, "layers": 2, "train": 256, "validation": 64, "epochs": 1, "memory_hidden": 64,
                "memory_layers": 2}
    if size == "gpu":  # a GPU runs the CPU's model in a blink: wider, within bench/gpu.sh's minutes
        return {"hidden": 512, "layers": 4, "train": 4096, "validation": 512, "epochs": 3, "memory_hidden": 1024,
                "memory_layers": 8}
    return {"hidden": 128, "layers": 4, "train": 4096, "validation": 512, "epochs": 3, "memory_hidden": 1024,
            "memory_layers": 8}


def first_at(evaluations: list[dict], target: float) -> float:
    """Seconds to the first evaluation whose F1 reaches ``target`` (infinity when none does)."""
    return next((item["seconds"] for item in evaluations if item["f1"] >= target), float("inf"))


def finetune_run(model: Path, data: Path, epochs: int, tokens: int, target: float, scratch: Path, world: int) -> dict:
    output = Path(tempfile.mkdtemp(dir=scratch))
    env = clean_env(**RECIPE, EPOCHS=epochs, MODEL_DIR=model, DATASET_DIR=data, OUTPUT_DIR=output,
                    LOG_INTERVAL=100000, CHECKPOINT_EVERY_STEPS=0, CHECKPOINT_EVERY_SECONDS=0)
    launched("worker.finetune", [], env, world)
    summary = json.loads((output / "summary.json").read_text())
    evaluations = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    evaluations = [line for line in evaluations if "accuracy" in line]
    return {"tokens_per_second": tokens / world / summary["train_seconds"],
            "seconds_to_f1": first_at(evaluations, target), "f1": summary["f1"],
            "cuda_peak_mib": usage_log_cuda_peak(output)}


def trainer_run(model: Path, data: Path, epochs: int, tokens: int, target: float, scratch: Path, world: int) -> dict:
    result = Path(tempfile.mkdtemp(dir=scratch)) / "result.json"
    launched("bench.hf_trainer_baseline", [str(model), str(data), str(result)], clean_env(**RECIPE, EPOCHS=epochs),
             world)
    measured = json.loads(result.read_text())
    return {"tokens_per_second": tokens / world / measured["train_seconds"],
            "seconds_to_f1": first_at(measured["evaluations"], target), "f1": measured["evaluations"][-1]["f1"],
            "cuda_peak_mib": written_cuda_peak(result.parent)}


def qa_peak_mib(model: Path, data: Path, strategy: str, scratch: Path, world: int) -> float:
    """The largest peak resident memory of any rank (the usage log's last line per rank)."""
    output = Path(tempfile.mkdtemp(dir=scratch))
    env = clean_env(MODEL_DIR=model, DATASET_DIR=data, OUTPUT_DIR=output, STRATEGY=strategy, PRECISION="fp32",
                    EPOCHS=1, BATCH_SIZE=8, MAX_SEQ_LENGTH=64, DOC_STRIDE=16, OMP_NUM_THREADS=1, TENSORBOARD="false")
    launched("worker.qa", [], env, world)
    peaks = [float(log.read_text().splitlines()[-1].split(" peak ")[1].split()[0])
             for log in sorted((output / "logs").glob("usage-rank*.log"))]
    assert len(peaks) == world, peaks
    return max(peaks)


def median_of(samples: list[dict]) -> dict:
    return {key: median_or_none([sample[key] for sample in samples]) for key in samples[0]}


def measure(size_name: str, repeats: int, target: float, log, sections: tuple[str, ...] = SECTIONS,
            world: int = WORLD) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testbed/: the models and data are made there
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # save_pretrained's bar for each model made here says nothing
    size = sizes(size_name)
    scratch = Path(tempfile.mkdtemp(prefix="bench-transformers-"))
    results: dict = {"quick": size_name == "quick", "size": size_name, "world": world, "repeats": repeats,
                     "target_f1": target, "sizes": size}
    if "finetune" in sections:
        results.update(fine_tuning(size, repeats, target, scratch, log, world))
    if "memory" in sections:
        log("peak memory per rank, worker.qa fsdp vs ddp...")
        results.update(memory(size, scratch, world, quick=size_name == "quick"))
    if "sft" in sections:
        results.update(sft.measure(size_name, repeats, scratch, log, world))
    if "settings" in sections:
        results.update(sft_settings.measure(size_name, repeats, scratch, log, world))
    if "load" in sections:
        results.update(shared_load.measure(size_name, scratch, log))
    return results


def fine_tuning(size: dict, repeats: int, target: float, scratch: Path, log, world: int) -> dict:
    """tokens/s and time to F1, worker.finetune against Trainer, alternating ``repeats`` times (medians)."""
    from transformers import AutoTokenizer

    from testbed.qa_data import make_model
    from testbed.text_data import make_texts

    model = make_model(scratch / "model", hidden=size["hidden"], layers=size["layers"])
    data = make_texts(scratch / "texts", train=size["train"], validation=size["validation"], named=False)
    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = (data / "train.csv").read_text().splitlines()[1:]
    tokens = size["epochs"] * sum(len(tokenizer(line.rsplit(",", 1)[0], truncation=True,
                                                max_length=int(RECIPE["MAX_SEQ_LENGTH"]))["input_ids"])
                                  for line in texts)
    samples: dict[str, list[dict]] = {"worker": [], "trainer": []}
    for round_ in range(repeats):
        log(f"fine-tuning, round {round_ + 1} of {repeats}: worker.finetune, then Trainer...")
        samples["worker"].append(finetune_run(model, data, size["epochs"], tokens, target, scratch, world))
        samples["trainer"].append(trainer_run(model, data, size["epochs"], tokens, target, scratch, world))
    return {"parameters": parameter_count(model),
            "finetune": {name: median_of(runs) for name, runs in samples.items()}}


def memory(size: dict, scratch: Path, world: int, quick: bool) -> dict:
    """Peak memory growth per rank, worker.qa fsdp against ddp (each over its floor: the same run of a tiny model);
    once: a peak of resident memory does not depend on the machine's load as a time does. The quick mode's model
    is as small as the floor's: it checks that the runs work, without the floor."""
    from testbed.qa_data import make_model, make_squad

    big = make_model(scratch / "big", hidden=size["memory_hidden"], layers=size["memory_layers"])
    models = {"": big} if quick else {"": big, "_floor": make_model(scratch / "small")}
    squad = make_squad(scratch / "squad", train=64, validation=16)
    return {"memory_mib": {f"{strategy}{suffix}": qa_peak_mib(model_dir, squad, strategy, scratch, world)
                           for strategy in ("fsdp", "ddp") for suffix, model_dir in models.items()},
            "memory_parameters": parameter_count(big)}


def parameter_count(model: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), "pt") as weights:
        return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())  # noqa: SIM118


def table(r: dict) -> str:
    size, world = r["sizes"], r.get("world", WORLD)
    rows = [("measure", "worker", "baseline", "ratio", "target")]
    if "finetune" in r:
        ours, theirs = r["finetune"]["worker"], r["finetune"]["trainer"]
        model = f"BERT {size['layers']}x{size['hidden']} ({r['parameters'] / 1e6:.1f} M params)"
        speed = ours["tokens_per_second"] / theirs["tokens_per_second"]
        time = ours["seconds_to_f1"] / theirs["seconds_to_f1"]
        rows += [(f"tokens/s per process, ws {world}, {model}, bf16",
                  f"{ours['tokens_per_second']:.0f} (worker.finetune, DDP)",
                  f"{theirs['tokens_per_second']:.0f} (Hugging Face Trainer)", f"{speed:.2f}",
                  verdict(speed, 1, False)),
                 (f"time to macro F1 {r['target_f1']:g}, ws {world} (s)",
                  f"{ours['seconds_to_f1']:.1f} (F1 {ours['f1']:.1f})",
                  f"{theirs['seconds_to_f1']:.1f} (F1 {theirs['f1']:.1f})", f"{time:.2f}", verdict(time, 1, True))]
    if "memory_mib" in r:
        peaks = r["memory_mib"]
        fsdp, ddp = (peaks[strategy] - peaks.get(f"{strategy}_floor", 0.0) for strategy in ("fsdp", "ddp"))
        state = 16 * r["memory_parameters"] / 2**20  # fp32 weights, gradients and Adam's two moments
        measure = "peak memory growth" if "fsdp_floor" in peaks else "peak memory (the quick mode: no floor)"
        rows += [(f"{measure} per rank, worker.qa, BERT {size['memory_layers']}x{size['memory_hidden']} "
                  f"({r['memory_parameters'] / 1e6:.1f} M params), ws {world} (MiB)", f"{fsdp:.0f} (fsdp)",
                  f"{ddp:.0f} (ddp; state {state:.0f})", f"{fsdp / ddp:.2f}" if ddp > 0 else "n/a",
                  verdict(fsdp / ddp, 0.55, True) if ddp > 0 and "fsdp_floor" in peaks else "")]
    if "sft" in r:
        rows += sft.rows(r)
    if "sft_settings" in r:
        rows += sft_settings.rows(r)
    if "shared_load" in r:
        rows += shared_load.rows(r)
    return render_rows(rows)


def sections_of(groups: list[str] | None) -> tuple[str, ...]:
    """The sections of --only's groups, in the order measure() runs them (every section without one)."""
    chosen = {section for group in groups or GROUPS for section in GROUPS[group]}
    return tuple(section for section in SECTIONS if section in chosen)


@in_scratch
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transformers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny model and a few steps, to check it runs")
    parser.add_argument("--size", choices=SIZES, default="full",
                        help="the models' and data's size: full (this page's figures), gpu (bench/gpu.sh's), quick")
    parser.add_argument("--world", type=int, default=WORLD, help="processes per run (one per GPU on CUDA)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repetitions per figure (median)")
    parser.add_argument("--target", type=float, default=95.0, help="macro F1 for time-to-F1")
    parser.add_argument("--only", choices=tuple(GROUPS), action="append",
                        help="a group of rows (again for more): worker.finetune vs Trainer, worker.qa fsdp vs ddp, "
                             "worker.sft vs TRL (with the next two), worker.sft's accumulation and token cache, "
                             "worker.sft's model read once vs by each rank")
    parser.add_argument("--json", type=Path, default=Path("bench-transformers.json"), help="where to write results")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    results = measure("quick" if args.quick else args.size, repeats, args.target,
                      log=lambda m: print(f"bench: {m}", file=sys.stderr),
                      sections=sections_of(args.only), world=args.world)
    import torch
    import transformers

    results["machine"] = {"platform": platform.platform(), "python": platform.python_version(),
                          "torch": torch.__version__, "transformers": transformers.__version__,
                          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print(f"\n(written to {args.json}; {results['machine']['date']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
