"""The benchmark's quick mode runs end to end, so that `python -m bench` cannot rot (no timing assertions)."""

import json
import math
import subprocess
import sys

import pytest

from testbed.mnist_data import raw_files, synthetic_digits, write_raw
from tests.conftest import ROOT


@pytest.mark.slow
@pytest.mark.onecore  # its runs follow one another, each mostly starting up: alone it kept 0.83 of a core busy
def test_quick_benchmark_prints_the_table_and_writes_json(tmp_path):
    write_raw(tmp_path / "data", raw_files(synthetic_digits(512, seed=1), synthetic_digits(128, seed=2)))
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, "-m", "bench", "--quick", "--data-dir", str(tmp_path / "data"),
                             "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for row in ("time to 98.0% test accuracy, world size 2", "training images/s per process, world size 2",
                "gradient sync ms/step, 2 ranks", "gen-manifests start-up", "render time, replicas",
                "peak resident memory per rank", "vs the standard loop with the worker's recipe",
                "STRATEGY/PRECISION fsdp/bf16", "memory growth per rank, resident after the steps, 67 M-param MLP, ws 2",
                "launch to first step, local-job, 2 pods", "./run.sh --local before the first pod",
                "recovery in place from a killed worker process, local-job, ws 2",
                "recovery in place from a pod lost whole, minus the back-off, local-job, ws 2",
                "phases: detection / round opened", "checkpoint stall per save, fsdp, MNIST CNN",
                "peak resident memory per rank, every option off"):
        assert row in result.stdout
    results = json.loads(out.read_text())
    assert [row["replicas"] for row in results["render_scale"]] == [1, 10, 100, 1000, 10000]
    assert set(results["memory_mib"]) == {"2"}  # the quick mode: world size 2 only (1 and 4 in the full run)
    sync = results["gradient_sync"]
    # measured directly: positive; DDP's cost is a difference of two step times (with and without sync),
    # which the quick mode's four steps can put below zero on a loaded machine
    assert all(sync[key] > 0 for key in ("flat_ms", "per_parameter_ms", "one_all_reduce_ms", "compute_step_ms",
                                          "ddp_step_ms", "bytes", "parameter_tensors"))
    assert math.isfinite(sync["ddp_ms"]) and math.isfinite(sync["ddp_fraction"])
    assert set(results["strategies"]) == {f"{s}/{p}" for s in ("allreduce", "ddp", "fsdp") for p in ("fp32", "bf16")}
    recovery = results["distributed_cost"]["recovery"]["ws2"]
    assert 0 <= recovery["process"]["detection_s"] < recovery["process"]["total_s"]
    assert recovery["process"]["backoff_s"] == 0  # in place: no pod recreated, no controller's back-off
    assert recovery["pod"]["backoff_s"] >= 0.9  # --backoff-seconds 1
    assert recovery["startup"]["first_step_s"] > 0
    memory = results["strategy_memory"]["2"]
    assert memory["fsdp"]["peak_growth_mib"] < memory["allreduce"]["peak_growth_mib"]  # sharding saves memory


@pytest.mark.slow
# CI runs it beside the training tier: its runs follow one another, each mostly starting up (alone 1.21 cores busy,
# 80 CPU-s in 66 s: /usr/bin/time -v of the command below), and the training tier's last minutes otherwise ran alone
@pytest.mark.onecore
def test_quick_transformer_benchmark_prints_its_groups_rows_and_writes_json(tmp_path):
    """python -m bench.transformers --quick, the groups bench/gpu.sh --dry-run does not run (its finetune and sft
    steps run the others: tests/test_gpu_check.py): worker.qa's fsdp against ddp, worker.sft's accumulation and token
    cache, and worker.sft's model loaded and sharded with its weights read once and by each rank, each run to the end
    (no timing assertions)."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    pytest.importorskip("peft")
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, "-m", "bench.transformers", "--quick", "--only", "memory", "--only",
                             "settings", "--only", "load", "--json", str(out)],
                            capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for row in ("per rank, worker.qa, BERT 2x64", "SFT loss per step, BATCH_SIZE 4 x GRADIENT_ACCUMULATION_STEPS 2 vs 8",
                "SFT restart's launch to first step, 256 conversations",
                "host memory a node's 2 processes take to load and shard Llama 2x64 (0.1 M params, fp32) under fsdp"):
        assert row in result.stdout
    assert "tokens/s per process" not in result.stdout  # the groups asked for, no other
    results = json.loads(out.read_text())
    assert "finetune" not in results and "sft" not in results
    # growth over a 2-layer, 32-wide BERT: at the quick mode's 64-wide model a few MiB either way (fsdp's freed
    # buffers now go back to the system), so measured, not signed
    assert results["memory_mib"] and all(math.isfinite(value) for value in results["memory_mib"].values())
    settings = results["sft_settings"]  # the same losses step for step (the metrics' 6 digits, fp32, no dropout)
    assert settings["accumulation"]["steps"] == 4 and settings["accumulation"]["largest_relative_difference"] < 1e-4
    assert all(seconds > 0 for seconds in settings["token_cache"].values())
    loaded = results["shared_load"]["2"]
    for way in ("once", "each"):  # each rank's peak once the model is sharded: past what its imports took
        assert len(loaded[way]["per_rank_mib"]) == 2 and loaded[way]["node_mib"] > loaded[way]["imported_mib"] > 0


@pytest.mark.slow
def test_quick_goodput_bench_runs_a_fault_schedule_and_accounts_for_every_fault(tmp_path):
    """python -m bench.goodput --quick: the default job clean and under three faults, each 3 s after the gang
    recovered from the last (a worker killed, a pod evicted, a pod lost whole): nothing lost, and the runtime
    accounted for each fault by its kind."""
    write_raw(tmp_path / "data", raw_files(synthetic_digits(1024, seed=1), synthetic_digits(256, seed=2)))
    out = tmp_path / "goodput.json"
    result = subprocess.run([sys.executable, "-m", "bench.goodput", "--quick", "--data-dir", str(tmp_path / "data"),
                             "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "goodput, a fault every 3 s, MNIST 2 pods" in result.stdout
    summary = json.loads(out.read_text())
    schedule = summary["summary"]["gang"]["schedules"]["3"]
    run = summary["results"]["runs"]["gang"]["3"][0]
    assert schedule["nothing_lost"], run
    assert run["delivered"] == ["worker", "preempt", "lost"]
    assert len(run["faults"]) == 3  # each fault recovered from is one line of faults.jsonl, by its kind
    assert [fault["kind"] for fault in run["faults"]] == ["worker failed", "pod stopped", "pod lost"]
    assert 0 < schedule["goodput_runtime"] <= 1 and schedule["goodput_external"] > 0


def test_start_up_bench_measures_each_process_kind_both_ways(tmp_path):
    """python -m bench.start_up, one round of the launcher's imports: a row with both figures, and the JSON."""
    out = tmp_path / "start-up.json"
    result = subprocess.run([sys.executable, "-m", "bench.start_up", "--repeats", "1", "--only", "launcher", "--json",
                             str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "CPU s of a process's imports, launcher (trainer_launcher.launch; exit: teardown)" in result.stdout
    figures = json.loads(out.read_text())
    assert list(figures) == ["launcher"] and all(figures["launcher"][way] > 0 for way in ("paused", "running"))


def test_checkpoint_io_bench_rows_of_the_bucket_and_staging_against_their_baselines(tmp_path):
    """python -m bench.checkpoint_io, one round of 6 MB: the mirror, the restore and S3 staging against boto3's
    TransferManager, the Hub against snapshot_download(max_workers=8), https against one stream (and one stream
    hashing), each with both throughputs and its target (no timing assertions)."""
    pytest.importorskip("moto")
    out = tmp_path / "io.json"
    result = subprocess.run([sys.executable, "-m", "bench.checkpoint_io", "--quick", "--only", "bucket", "--only",
                             "staging", "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [row["phase"] for row in results["bucket"]] == ["mirror upload", "restore", "s3 staging"]
    assert [row["phase"].split(":")[0] for row in results["staging"]] == ["the Hub", "https", "https"]
    rows = results["bucket"] + results["staging"]
    assert all(row["ours_mb_s"] > 0 and row["baseline_mb_s"] > 0 and row["target"] == 0.9 for row in rows)
    assert all(row["phase"] in result.stdout for row in rows)  # the table


@pytest.mark.slow
def test_checkpoint_io_bench_measures_what_a_save_costs_and_rank_0s_share_of_the_hashing(tmp_path):
    """python -m bench.checkpoint_io --quick --only save: worker.sft's full fine-tune under fsdp, without saves
    between, with asynchronous and with synchronous ones, against the floor; rank 0's hashing against its share."""
    out = tmp_path / "save.json"
    result = subprocess.run([sys.executable, "-m", "bench.checkpoint_io", "--quick", "--only", "save", "--json",
                             str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    save = json.loads(out.read_text())["save"]
    assert save["saves"] == 1 and save["floor_s"] > 0 and set(save["train_seconds"]) == {"none", "async", "sync"}
    assert 0 < save["rank0_hashed_mb"] < save["hashed_total_mb"]  # its share, not every rank's
    assert "training seconds a save costs, async" in result.stdout
