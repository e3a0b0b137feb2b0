"""python -m bench: every figure as a ratio of two things measured in the same run, alternating, medians.

    python -m bench                                  # the digits the worker ships (worker/mnist/mnist-sample)
    python -m bench --data-dir DIR                   # DIR/MNIST/raw/ holding the four MNIST files
    python -m bench --quick                          # a few steps of everything (the test suite runs this)
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
from pathlib import Path

from bench import distributed_cost, generator_cost, gradsync_cost, machine, recovery, staging_cost, training
from bench.digits import default_data_dir
from bench.stats import alternate, in_scratch, mnist_bench_parser, render_rows, verdict, worlds
from trainer_contract.program_settings import STRATEGIES


def run(data_dir: Path, quick: bool, repeats: int, target: float, log) -> dict:
    results: dict = {"target_accuracy": target, "quick": quick, "repeats": repeats}
    log("time to accuracy (worker vs standard DDP loop, with its recipe and with the worker's)...")
    for world in worlds(quick):
        contenders = {
            "worker_s": lambda world=world: training.worker_time_to_accuracy(data_dir, world, target, quick),
            "standard_s": lambda world=world: training.standard_time_to_accuracy(data_dir, world, target, quick),
        }
        if world == 2:
            contenders["standard_recipe_s"] = lambda world=world: training.standard_time_to_accuracy(
                data_dir, world, target, quick, recipe="worker")
        results[f"time_to_accuracy_ws{world}"] = alternate(contenders, repeats)
    log("strategies x precisions, world size 2 (bf16 once: emulated, about 10x slower, on CPUs without bf16 units)...")
    results["strategies"] = strategy_matrix(data_dir, target, quick, repeats)
    log("peak memory per rank, fsdp vs allreduce, 67 M-parameter MLP...")
    results["strategy_memory"] = {
        str(world): {strategy: training.strategy_memory(world, strategy, quick) for strategy in ("allreduce", "fsdp")}
        for world in ((2,) if quick else (2, 4))}  # quick: the code path once; 4 ranks on 2 cores cost a minute
    log("throughput (worker vs the same CNN under DDP with a DataLoader)...")
    for world in worlds(quick):
        results[f"throughput_ws{world}"] = alternate({
            "worker": lambda world=world: training.worker_throughput(data_dir, world, quick),
            "ddp_dataloader": lambda world=world: training.ddp_throughput(data_dir, world, quick),
        }, repeats)
    log("gradient sync cost on 2 ranks...")
    results["gradient_sync"] = gradsync_cost.measure(quick)
    log("machine limit...")
    threads = min(2, os.cpu_count() or 1)
    matmul = machine.matmul_flops(threads, seconds=0.2 if quick else 2.0)
    world = worlds(quick)[0]  # the machine's training rate: every process's images, at the smallest world measured
    achieved = world * results[f"throughput_ws{world}"]["worker"] * machine.TRAINING_FLOPS_PER_IMAGE
    results["machine_limit"] = {"threads": threads, "matmul_gflops": matmul / 1e9, "training_gflops": achieved / 1e9,
                                "fraction": achieved / matmul}
    log("generator start-up and render scale...")
    results["generator_startup"] = generator_cost.startup(3 if quick else 15)
    results["render_scale"] = generator_cost.render_scale(3 if quick else 30)
    log("staging from the Hub and S3 vs the libraries' own downloads...")
    # quick: each contender once on 2 MB, the code path (its rows' figures mean nothing there)
    results["staging"] = staging_cost.measure(2 if quick else 200, 1 if quick else 7)
    log("peak memory per rank...")
    results["memory_mib"] = {str(world): training.peak_memory_per_rank(data_dir, world, quick)
                             for world in (*worlds(quick), *(() if quick else (4,)))}
    results["distributed_cost"] = distributed_cost.measure(data_dir, quick, repeats, log)
    return results


PRECISIONS = ("fp32", "bf16")  # fp16 needs CUDA


# On the one node the benchmark runs on, hsdp's mesh is fsdp's (one replica): measured once, as fsdp.
ONE_NODE_STRATEGIES = tuple(strategy for strategy in STRATEGIES if strategy != "hsdp")


def strategy_matrix(data_dir: Path, target: float, quick: bool, repeats: int) -> dict:
    """Time to target and images/s at world size 2 for each STRATEGY x PRECISION, alternating within a round;
    medians. bf16 runs one round: without bf16 units this CPU computes it about 10x slower than fp32."""
    samples: dict[str, list[dict]] = {f"{s}/{p}": [] for p in PRECISIONS for s in ONE_NODE_STRATEGIES}
    for round_ in range(repeats):
        for precision in PRECISIONS:
            if precision != "fp32" and round_ > 0:
                continue
            for strategy in ONE_NODE_STRATEGIES:
                samples[f"{strategy}/{precision}"].append(
                    training.strategy_run(data_dir, 2, target, quick, strategy, precision))
    return {key: {"seconds": statistics.median(r["seconds"] for r in runs),
                  "images_per_second": statistics.median(r["images_per_second"] for r in runs),
                  "runs": len(runs)} for key, runs in samples.items()}


def table(r: dict) -> str:
    rows = [("measure", "worker", "baseline", "ratio", "target")]
    for world in measured_worlds(r, "time_to_accuracy"):
        t = r[f"time_to_accuracy_ws{world}"]
        ratio = t["worker_s"] / t["standard_s"]
        rows.append((f"time to {100 * r['target_accuracy']:.1f}% test accuracy, world size {world} (s)",
                     f"{t['worker_s']:.1f}", f"{t['standard_s']:.1f} (standard DDP loop)", f"{ratio:.3f}",
                     verdict(ratio, 0.25, True) if world == 2 else ""))
    t = r["time_to_accuracy_ws2"]
    ratio = t["worker_s"] / t["standard_recipe_s"]
    rows.append((f"time to {100 * r['target_accuracy']:.1f}% vs the standard loop with the worker's recipe, ws 2 (s)",
                 f"{t['worker_s']:.1f}", f"{t['standard_recipe_s']:.1f} (DDP loop, our model/Adam/one-cycle)",
                 f"{ratio:.3f}", ""))
    anchor = r["strategies"]["allreduce/fp32"]
    for key, s in r["strategies"].items():
        rows.append((f"STRATEGY/PRECISION {key}, ws 2: time to {100 * r['target_accuracy']:.1f}% (s), images/s",
                     f"{s['seconds']:.1f} s, {s['images_per_second']:.0f}/s",
                     f"{anchor['seconds']:.1f} s, {anchor['images_per_second']:.0f}/s (allreduce/fp32)",
                     f"{s['seconds'] / anchor['seconds']:.2f} time, {s['images_per_second'] / anchor['images_per_second']:.2f} rate",
                     f"{s['runs']} run{'s' if s['runs'] > 1 else ''}"))
    for world, by_strategy in r["strategy_memory"].items():
        fsdp, allreduce = by_strategy["fsdp"], by_strategy["allreduce"]
        for key, what in (("peak_growth_mib", "peak"), ("resident_growth_mib", "resident after the steps")):
            rows.append((f"memory growth per rank, {what}, 67 M-param MLP, ws {world} (MiB)", f"{fsdp[key]:.0f} (fsdp)",
                         f"{allreduce[key]:.0f} (allreduce; state {allreduce['state_mib']:.0f})",
                         f"{fsdp[key] / allreduce[key]:.2f}", f"→ 1/{world} = {1 / int(world):.2f}"))
    for world in measured_worlds(r, "throughput"):
        t = r[f"throughput_ws{world}"]
        ratio = t["worker"] / t["ddp_dataloader"]
        rows.append((f"training images/s per process, world size {world}", f"{t['worker']:.0f}",
                     f"{t['ddp_dataloader']:.0f} (same CNN, DDP + DataLoader)", f"{ratio:.2f}", verdict(ratio, 1.0, False)))
    g = r["gradient_sync"]
    rows.append(("gradient sync ms/step, 2 ranks", f"{g['flat_ms']:.2f} (one flat all-reduce)",
                 f"{g['per_parameter_ms']:.2f} (per-parameter loop)", f"{g['per_parameter_ms'] / g['flat_ms']:.2f}x cheaper",
                 verdict(g["per_parameter_ms"] / g["flat_ms"], 2.0, False)))
    rows.append(("gradient sync vs one all-reduce of the same bytes", f"{g['flat_ms']:.2f}",
                 f"{g['one_all_reduce_ms']:.2f} ({g['bytes']} bytes)", f"{g['flat_ms'] / g['one_all_reduce_ms']:.2f}",
                 verdict(g["flat_ms"] / g["one_all_reduce_ms"], 1.2, True)))
    rows.append(("gradient sync share of the step", f"{100 * g['flat_fraction']:.1f}%",
                 f"{100 * g['per_parameter_fraction']:.1f}% (loop), {100 * g['ddp_fraction']:.1f}% (DDP, "
                 f"{g['ddp_ms']:.2f} ms)", "", ""))
    m = r["machine_limit"]
    rows.append((f"training GFLOP/s vs matmul GFLOP/s, {m['threads']} threads", f"{m['training_gflops']:.1f}",
                 f"{m['matmul_gflops']:.1f}", f"{m['fraction']:.2f}", ""))
    rows.extend(generator_cost.rows(r["generator_startup"], r["render_scale"]))
    if "staging" in r:  # results written before the staging bench existed have none
        rows.extend(staging_cost.rows(r["staging"]))
    rows.append((f"peak resident memory per rank, world size {'/'.join(r['memory_mib'])} (MiB)",
                 "/".join(f"{v:.0f}" for v in r["memory_mib"].values()), "", "", ""))
    rows.extend(distributed_cost_rows(r["distributed_cost"]))
    return render_rows(rows)


def measured_worlds(results: dict, measure: str) -> list[int]:
    """The world sizes ``measure`` was measured at (``{measure}_ws{N}``): the quick mode measures fewer."""
    return [world for world in (1, 2) if f"{measure}_ws{world}" in results]


def distributed_cost_rows(d: dict) -> list[tuple[str, str, str, str, str]]:
    """What indexed-trainer adds around the training (bench.distributed_cost), against its floor."""
    rows = []
    for world in measured_worlds(d, "start"):
        s = d[f"start_ws{world}"]
        ratio = s["torchrun_s"] / s["floor_s"]
        rows.append((f"launch to first step, torchrun --standalone, world size {world} (s)", f"{s['torchrun_s']:.2f}",
                     f"{s['floor_s']:.2f} (import torch + gloo group)", f"{ratio:.2f}", verdict(ratio, 1.5, True)))
    local, floor = d["start_local_job"], d["start_ws2"]["floor_s"]
    ratio = local["first_step_s"] / floor
    rows.append(("launch to first step, local-job, 2 pods (s)", f"{local['first_step_s']:.2f} (first pod at "
                 f"{local['pod_started_s']:.2f})", f"{floor:.2f} (import torch + gloo group, ws 2)", f"{ratio:.2f}",
                 verdict(ratio, 1.5, True)))
    pods_own = local["first_step_s"] - local["pod_started_s"]
    ratio = d["run_sh_before_pods_s"] / pods_own
    rows.append(("./run.sh --local before the first pod vs the pods' own start (s)", f"{d['run_sh_before_pods_s']:.2f}",
                 f"{pods_own:.2f} (pod start to first step)", f"{ratio:.2f}", verdict(ratio, 1.0, True)))
    if "ws2" in d["recovery"]:  # results written before in-place recovery measured a recreated gang
        rows.extend(recovery.rows(d["recovery"]))
    for key, stall in d["checkpoint_stall"].items():
        ratio = stall["async_blocked_s"] / stall["sync_blocked_s"]
        model = "MNIST CNN" if key.endswith("cnn") else "67 M-param MLP"
        rows.append((f"checkpoint stall per save, {key.split('/')[0]}, {model}, ws 2 (s)",
                     f"{stall['async_blocked_s']:.3f} (async; on disk after {stall['async_write_s']:.2f}; a run's "
                     f"first save {stall['async_first_blocked_s']:.3f})",
                     f"{stall['sync_blocked_s']:.3f} (synchronous)", f"{ratio:.2f}",
                     # the goal is for a state worth writing in the background; the CNN's saves take milliseconds
                     verdict(ratio, 0.10, True) if key.endswith("mlp") else ""))
    m = d["memory_floor"]
    budget = 1.2 * m["floor_mib"] + m["data_mib"] + m["model_mib"]
    rows.append(("peak resident memory per rank, every option off, ws 2 (MiB)", f"{m['off_mib']:.0f} (on: "
                 f"{m['on_mib']:.0f})", f"{budget:.0f} (1.2 x floor {m['floor_mib']:.0f} + data {m['data_mib']:.0f} + "
                 f"model {m['model_mib']:.0f})", f"{m['off_mib'] / budget:.2f}", verdict(m["off_mib"] / budget, 1.0, True)))
    return rows


@in_scratch
def main(argv: list[str] | None = None) -> int:
    parser = mnist_bench_parser("python -m bench", __doc__, "a few steps of everything, to check the benchmark runs", 3)
    parser.add_argument("--target", type=float, default=0.98, help="test accuracy for time-to-accuracy")
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"), help="where to write the results")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or default_data_dir()
    repeats = 1 if args.quick else args.repeats
    results = run(data_dir, args.quick, repeats, args.target, log=lambda m: print(f"bench: {m}", file=sys.stderr))
    results["machine"] = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                          "cpus": os.cpu_count(), "python": platform.python_version(),
                          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    import torch

    results["machine"]["torch"] = torch.__version__
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print(f"\n(written to {args.json}; {results['machine']['cpus']} CPUs, {results['machine']['date']})")
    return 0
