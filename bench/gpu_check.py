"""bench/gpu.sh's steps, one per call, each writing its row of the table as JSON; and the table itself.

    python -m bench.gpu_check check --row ROW.json --world-file WORLD [--dry-run]
    python -m bench.gpu_check mnist --strategy ddp --world N --row ROW.json [--dry-run]
    python -m bench.gpu_check finetune|sft|sft-hsdp|stall --world N --row ROW.json [--dry-run]
    python -m bench.gpu_check table --rows DIR --steps check,mnist-ddp,... --json RESULT.json [--dry-run]

A step exits 0 when it passed, 1 when it ran and failed (its row says why), and the check 2 when there is no GPU
(gpu.sh stops there). --dry-run runs each step on the CPU at the tiniest size, so that the wiring is tested on a
machine without a GPU (tests/test_gpu_check.py); its figures mean nothing. The table step writes a row for every
step that left none, from DIR/<step>.reason (gpu.sh's: a timeout, a crash's last line), and exits 1 if any row
failed. Nothing is downloaded: MNIST is the sample the worker ships, the models and texts are made by testbed/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench.stats import ROOT, clean_env, in_scratch, launcher_command, render_rows, usage_log_cuda_peak

MNIST_TARGET = 0.99
F1_TARGET = 95.0
STALL_FIGURES = re.compile(r"(\w+_s)=(\d+\.\d+)")
STARTED = time.monotonic()


def row(step: str, ok: bool, result: str, cuda_peak: str, **details) -> dict:
    """One line of the table: what ran, whether it passed, what it measured and its peak CUDA memory per rank."""
    return {"step": step, "ok": ok, "seconds": round(time.monotonic() - STARTED, 1), "result": result,
            "cuda_peak_mib": cuda_peak, "details": details}


def mib(value: float | None) -> str:
    return "n/a (CPU)" if value is None else f"{value:.0f}"


def seconds(value: float) -> str:
    return f"{value:.1f} s" if math.isfinite(value) else "not reached"


def on_cpu_where_cuda_was_asked(dry_run: bool, *peaks: float | None) -> bool:
    """A run that should have trained on the GPU and did not: no CUDA peak recorded (CUDA was never used)."""
    return not dry_run and any(peak is None for peak in peaks)


# -- check ------------------------------------------------------------------------------------------------------
def check(args) -> tuple[dict, int]:
    import torch
    import torch.distributed as dist

    nccl = dist.is_nccl_available()
    nccl_version = ".".join(map(str, torch.cuda.nccl.version())) if nccl and torch.cuda.is_available() else None
    cuda = torch.cuda.is_available()
    facts = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": cuda,
             "devices": torch.cuda.device_count() if cuda else 0, "nccl_available": nccl, "nccl_version": nccl_version}
    if args.dry_run:
        args.world_file.write_text("1\n")
        return row("check", True, f"dry run on the CPU (torch {torch.__version__}, CUDA available: {cuda}, NCCL "
                                  f"built in: {nccl})", "-", **facts), 0
    if not cuda:
        print(f"no GPU: torch.cuda.is_available() is False (torch {torch.__version__}, CUDA build "
              f"{torch.version.cuda}); run it on a machine with an NVIDIA GPU and its driver, or with --dry-run",
              file=sys.stderr)
        return row("check", False, "no GPU: torch.cuda.is_available() is False", "-", **facts), 2
    device = torch.device("cuda", 0)
    facts.update(name=torch.cuda.get_device_name(device),
                 capability=".".join(map(str, torch.cuda.get_device_capability(device))),
                 bf16=torch.cuda.is_bf16_supported())
    args.world_file.write_text(f"{facts['devices']}\n")
    problem = nccl_problem(torch, dist, device) if nccl else "this torch has no NCCL"
    result = (f"{facts['name']} x{facts['devices']}, capability {facts['capability']}, bf16 "
              f"{'yes' if facts['bf16'] else 'NO'}, NCCL {nccl_version or 'missing'}"
              + (f": {problem}" if problem else " (a world-1 all-reduce ran)")
              + f"; torch {torch.__version__}, CUDA {torch.version.cuda}")
    ok = problem is None and bool(facts["bf16"])
    return row("check", ok, result, "-", **facts), 0 if ok else 1


def nccl_problem(torch, dist, device) -> str | None:
    """None when a one-rank NCCL group sums a tensor on ``device``; else the error's first line."""
    try:
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=device)
        tensor = torch.ones(4, device=device)
        dist.all_reduce(tensor)
        torch.cuda.synchronize(device)
        return None if tensor.sum().item() == 4 else f"all-reduce gave {tensor.tolist()}"
    except Exception as error:  # noqa: BLE001 - any failure is the finding
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# -- MNIST --------------------------------------------------------------------------------------------------------
def streamed(command: list[str], env: dict) -> tuple[int, list[str]]:
    """Run ``command``, copying its output to ours as it comes (the step's log, up to a timeout's kill)."""
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    return process.wait(), lines


def mnist(args) -> tuple[dict, int]:
    """The built-in worker under the launcher, STRATEGY ddp or fsdp, bf16, on the digits it ships, to 99%."""
    step = f"MNIST {args.strategy}/bf16, ws {args.world}, to {MNIST_TARGET:.0%}"
    output = Path(tempfile.mkdtemp(prefix="gpu-check-mnist-"))
    env = clean_env(DATA_DIR=output / "data", OUTPUT_DIR=output / "run", DOWNLOAD="false",
                    MNIST_SAMPLE_FALLBACK="true", STRATEGY=args.strategy, PRECISION="bf16", LOG_INTERVAL=100000,
                    TENSORBOARD="false")
    if args.dry_run:
        env.update(EPOCHS="1", TRAIN_SAMPLES="256")
    launched = time.time()
    code, lines = streamed(launcher_command(args.world, "worker"), env)
    metrics = output / "run" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    if code != 0 or not records:
        return row(step, False, f"the worker exited {code}: {last_words(lines)}", "-"), 1
    reached = next((record for record in records if record["accuracy"] >= MNIST_TARGET), None)
    peak = records[-1].get("cuda_peak_mib")
    device = next((line.split(" steps per epoch on ")[1].split(",")[0] for line in lines
                   if " steps per epoch on " in line), "unknown")
    final = (f"final {records[-1]['accuracy']:.2%} after {len(records)} epochs, "
             f"{records[-1]['images_per_second']:.0f} images/s")
    details = {"records": records, "device": device, "seconds_to_target": None}
    if args.dry_run:
        return row(step, True, f"dry run on {device}: {final} (target not checked)", mib(peak), **details), 0
    if not device.startswith("cuda") or on_cpu_where_cuda_was_asked(args.dry_run, peak):
        return row(step, False, f"trained on {device}, not a GPU: {final}", mib(peak), **details), 1
    if reached is None:
        return row(step, False, f"{MNIST_TARGET:.0%} not reached: {final}", mib(peak), **details), 1
    details["seconds_to_target"] = round(reached["time"] - launched, 2)
    return row(step, True, f"{reached['accuracy']:.2%} at epoch {reached['epoch']}, "
                           f"{details['seconds_to_target']:.1f} s from the launch; {final}", mib(peak), **details), 0


def last_words(lines: list[str]) -> str:
    """The last line of a failed run worth showing in a table cell."""
    words = [line.strip() for line in lines if line.strip()]
    return words[-1][:200] if words else "no output"


# -- the transformer workloads against Hugging Face's Trainer and TRL ---------------------------------------------
def transformers_results(args, sections: tuple[str, ...]) -> dict:
    from bench import transformers

    size = "quick" if args.dry_run else "gpu"
    return transformers.measure(size, 1, F1_TARGET, log=lambda m: print(f"bench: {m}", flush=True),
                                sections=sections, world=args.world)


def finetune(args) -> tuple[dict, int]:
    results = transformers_results(args, ("finetune",))
    ours, theirs = results["finetune"]["worker"], results["finetune"]["trainer"]
    size = results["sizes"]
    step = f"finetune vs HF Trainer, BERT {size['layers']}x{size['hidden']}, bf16, ws {args.world}"
    result = (f"to F1 {F1_TARGET:g}: {seconds(ours['seconds_to_f1'])} vs {seconds(theirs['seconds_to_f1'])}; "
              f"F1 {ours['f1']:.1f} vs {theirs['f1']:.1f}")
    return compared_row(args, step, ours, theirs, result, results)


def sft(args) -> tuple[dict, int]:
    from bench.transformers import GROUPS

    # sft's group on a GPU; a dry run checks this row's wiring alone (the group's other rows run in the test suite's
    # python -m bench.transformers --quick)
    results = transformers_results(args, ("sft",) if args.dry_run else GROUPS["sft"])
    ours, theirs, size = results["sft"]["worker"], results["sft"]["trl"], results["sft"]["sizes"]
    step = f"sft vs TRL SFTTrainer, Llama {size['layers']}x{size['hidden']} LoRA, bf16, ws {args.world}"
    result = (f"evaluation loss {ours['evaluation_loss']:.4f} vs {theirs['evaluation_loss']:.4f}; "
              f"peak resident {ours['peak_mib']:.0f} vs {theirs['peak_mib']:.0f} MiB")
    return compared_row(args, step, ours, theirs, result, results)


def compared_row(args, step: str, ours: dict, theirs: dict, result: str, results: dict) -> tuple[dict, int]:
    """A workload's row against its library's baseline: tokens/s per process first, then ``result``; failed where it
    trained on the CPU though CUDA was asked for."""
    ratio = ours["tokens_per_second"] / theirs["tokens_per_second"]
    result = (f"tokens/s per process {ours['tokens_per_second']:.0f} vs {theirs['tokens_per_second']:.0f} "
              f"({ratio:.2f}); {result}")
    peaks = f"{mib(ours['cuda_peak_mib'])} vs {mib(theirs['cuda_peak_mib'])}"
    if on_cpu_where_cuda_was_asked(args.dry_run, ours["cuda_peak_mib"], theirs["cuda_peak_mib"]):
        return row(step, False, f"trained on the CPU, not a GPU: {result}", peaks, **results), 1
    return row(step, True, result, peaks, **results), 0


# -- the SFT example under hsdp ------------------------------------------------------------------------------------
SFT_EXAMPLE = ROOT / "examples" / "sft" / "values.yaml"


def sft_example_variables() -> dict[str, str]:
    """What examples/sft's render gives worker.sft: its ConfigMap's variables of the program (config.yaml's
    hyper-parameters in capitals, and the pod's directories), not the launcher's."""
    import yaml

    from generator.resources import default_values_path
    from generator.targets.kubernetes import render_manifests
    from generator.validation import validate_values
    from generator.values import resolve_values
    from trainer_contract.program_settings import program_variables

    manifests = render_manifests(validate_values(resolve_values(default_values_path(), [SFT_EXAMPLE])))
    config_map = next(doc for doc in map(yaml.safe_load, (m.text for m in manifests)) if doc["kind"] == "ConfigMap")
    return {name: value for name, value in config_map["data"].items() if name in program_variables("worker.sft")}


def sft_hsdp(args) -> tuple[dict, int]:
    """examples/sft's settings made a full fine-tune under STRATEGY hsdp (FSDP2 on a nodes x processes mesh: one node
    here, so the shards span its processes), bf16, on the process group's NCCL (gloo in a dry run), on the tests' tiny
    Llama: it trains, writes every rank's shards (DCP) each CHECKPOINT_EVERY_STEPS, and a second start resumes from
    the newest, resharded, and exports again."""
    from testbed.sft_data import make_chat_data, make_model

    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-sft-hsdp-"))
    hidden, train = (32, 64) if args.dry_run else (512, 2048)
    settings = {**sft_example_variables(), "LORA_RANK": "0", "EXPORT_MERGED": "false", "STRATEGY": "hsdp",
                "MAX_SEQ_LENGTH": "64", "TRAIN_SAMPLES": "0", "EVAL_SAMPLES": "0", "CHECKPOINT_EVERY_STEPS": "4",
                "LOG_INTERVAL": "100000", "TENSORBOARD": "false"}
    # the render's places for the model, the data and the run are on the pod's volume: here, in the scratch directory
    data = make_chat_data(scratch / "chat", train=train, validation=16)
    env = clean_env(**{**settings, "MODEL_DIR": make_model(scratch / "llama", hidden=hidden, layers=2),
                       "DATASET_DIR": data, "OUTPUT_DIR": scratch / "run"})
    step = f"SFT example, full fine-tune, hsdp/{settings['PRECISION']}, ws {args.world}, resumed from its shards"
    runs = [streamed(launcher_command(args.world, "worker.sft"), env)]
    # as if killed after its last checkpoint, before its summary: the second start resumes from its shards (on the
    # finished run, the launcher would find it complete and start nothing)
    (scratch / "run" / "summary.json").unlink(missing_ok=True)
    runs.append(streamed(launcher_command(args.world, "worker.sft"), env))
    failed = next(((code, lines) for code, lines in runs if code != 0), None)
    if failed is not None:
        return row(step, False, f"worker.sft exited {failed[0]}: {last_words(failed[1])}", "-"), 1
    shards = [path for path in (scratch / "run" / "checkpoints").iterdir() if path.is_dir()]
    resumed = next((line.strip().removeprefix("Rank 0: ") for line in runs[1][1] if "resuming from" in line), None)
    summary = json.loads((scratch / "run" / "summary.json").read_text())
    peak = usage_log_cuda_peak(scratch / "run")
    started = next((line.strip().removeprefix("Rank 0: ") for line in runs[0][1] if " weights train, under " in line),
                   "")
    details = {"summary": summary, "sharded_checkpoints": sorted(path.name for path in shards), "resumed": resumed,
               "start_line": started}
    result = (f"evaluation loss {summary['loss']:.4f} after {summary['step']} steps; {len(shards)} sharded "
              f"checkpoints kept; second start: {resumed or 'did not resume'}")
    if not shards or resumed is None or " under hsdp" not in started:
        return row(step, False, result, mib(peak), **details), 1
    if on_cpu_where_cuda_was_asked(args.dry_run, peak):
        return row(step, False, f"trained on the CPU, not a GPU: {result}", mib(peak), **details), 1
    return row(step, True, result, mib(peak), **details), 0


# -- the checkpoint stall -------------------------------------------------------------------------------------------
def stall(args) -> tuple[dict, int]:
    """bench/checkpoint_stall.py on the GPU: the 67 M-parameter MLP (768 MiB a checkpoint) under fsdp and
    allreduce; the MNIST CNN on the CPU in a dry run."""
    model, repeats = ("cnn", 1) if args.dry_run else ("mlp", 2)
    device = "cpu" if args.dry_run else "cuda"
    step = f"checkpoint stall per save, {model.upper()}, ws {args.world}, on {device}"
    figures, parts = {}, []
    for strategy in ("fsdp", "allreduce"):
        code, lines = streamed(launcher_command(args.world, "bench.checkpoint_stall", "--strategy", strategy, "--model",
                                                model, "--repeats", str(repeats), "--device", device, "--directory",
                                                tempfile.gettempdir()), clean_env(OMP_NUM_THREADS=1))
        found = dict(next((STALL_FIGURES.findall(line) for line in lines if "sync_blocked_s=" in line), []))
        if code != 0 or not found:
            return row(step, False, f"{strategy}: exited {code}: {last_words(lines)}", "-", **figures), 1
        figures[strategy] = {key: float(value) for key, value in found.items()}
        stalls = figures[strategy]
        parts.append(f"{strategy} async {stalls['async_blocked_s']:.3f} s vs sync {stalls['sync_blocked_s']:.3f} s "
                     f"({stalls['async_blocked_s'] / max(stalls['sync_blocked_s'], 1e-9):.2f}; first async "
                     f"{stalls['async_first_blocked_s']:.3f} s)")
    return row(step, True, "; ".join(parts), "-", **figures), 0


# -- the table ----------------------------------------------------------------------------------------------------
def table(args) -> int:
    rows = []
    for name in args.steps.split(","):
        written = args.rows / f"{name}.json"
        if written.is_file():
            rows.append({"name": name, **json.loads(written.read_text())})
            continue
        reason = args.rows / f"{name}.reason"
        why = reason.read_text().strip() if reason.is_file() else "no result: the step left no row"
        rows.append({"name": name, "step": "", "ok": False, "seconds": None, "result": why, "cuda_peak_mib": "-",
                     "details": {}})
    lines = [("step", "what", "status", "s", "result", "peak CUDA MiB per rank (ours vs theirs)")]
    lines += [(item["name"], item["step"], "ok" if item["ok"] else "FAILED",
               "" if item["seconds"] is None else f"{item['seconds']:.0f}", item["result"], item["cuda_peak_mib"])
              for item in rows]
    print(render_rows(lines))
    machine = next((item["details"] for item in rows if item["name"] == "check"), {})
    report = {"dry_run": args.dry_run, "machine": machine, "rows": rows,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    dry = "; a dry run on the CPU: its figures mean nothing" if args.dry_run else ""
    print(f"\n(written to {args.json}; {report['date']}{dry})")
    return 0 if all(item["ok"] for item in rows) else 1


STEPS: dict[str, Callable] = {"check": check, "mnist": mnist, "finetune": finetune, "sft": sft, "sft-hsdp": sft_hsdp,
                              "stall": stall}


@in_scratch
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=[*STEPS, "table"])
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, at the tiniest size")
    parser.add_argument("--row", type=Path, help="where a step writes its row (JSON)")
    parser.add_argument("--world", type=int, default=1, help="processes per run: one per GPU")
    parser.add_argument("--world-file", type=Path, help="check: where to write the number of GPUs to use")
    parser.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp", help="mnist: the worker's STRATEGY")
    parser.add_argument("--rows", type=Path, help="table: the steps' rows and reasons")
    parser.add_argument("--steps", default="", help="table: the steps in order, comma-separated")
    parser.add_argument("--json", type=Path, help="table: where to write the whole table (JSON)")
    args = parser.parse_args(argv)
    if args.step == "table":
        return table(args)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the tokenizers' fork warning says nothing here
    try:
        result, code = STEPS[args.step](args)
    except Exception as error:  # noqa: BLE001 - a step that breaks is a row that says how, and the next step runs
        traceback.print_exc()
        result, code = row(args.step, False, reason_of(error), "-"), 1
    args.row.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return code


def reason_of(error: Exception) -> str:
    """An exception in a table cell: its type, its first line and, for a run's output, its last."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip().strip("=-")]
    if not lines:
        return type(error).__name__
    if len(lines) == 1:
        return f"{type(error).__name__}: {lines[0][:240]}"
    return f"{type(error).__name__}: {lines[0][:100]} ... {lines[-1][:160]}"


if __name__ == "__main__":
    sys.exit(main())
