"""bench/gpu.sh without a GPU: its dry run (every step on the CPU at the tiniest size) gives a row per step; a step
that breaks, leaves no row or runs out of time says so in its row and the next one runs; without a GPU and without
--dry-run it stops at once with one line. What the steps measure on a GPU is not tested here (no GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

STEPS = ["check", "mnist-ddp", "mnist-fsdp", "finetune", "sft", "sft-hsdp", "stall"]


def gpu_sh(*args: str, timeout: float, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("OUT", "GPU_CHECK_DRY_RUN")}
    return subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh"), *args], capture_output=True, text=True,
                          timeout=timeout, env={**environment, "PYTHON": sys.executable, **env})


def table_lines(stdout: str) -> dict[str, list[str]]:
    """The table's rows by step name, each as its cells."""
    lines = stdout.splitlines()
    headers = [index for index, line in enumerate(lines) if line.startswith("step ")]
    assert len(headers) == 1, stdout  # one table
    rows = {}
    for line in lines[headers[0] + 2:]:
        if not line.strip():
            break
        cells = [cell.strip() for cell in line.split(" | ")]
        rows[cells[0]] = cells
    return rows


def test_without_a_gpu_it_stops_at_once_with_one_line(tmp_path):
    result = gpu_sh("--json", str(tmp_path / "table.json"), timeout=300, CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.splitlines()[-1].startswith("gpu.sh: no GPU: torch.cuda.is_available() is False")
    assert "step " not in result.stdout and not (tmp_path / "table.json").exists()  # nothing else ran


@pytest.mark.slow
@pytest.mark.onecore
def test_a_failing_step_says_why_in_its_row_and_the_next_one_runs(tmp_path):
    """The steps are faked (bench.gpu_check's STEPS replaced) so that each way of failing happens in seconds: an
    exception, an exit without a row, a step past its time; then the budget is spent and the rest are skipped."""
    fake = tmp_path / "fake_gpu_check.py"
    fake.write_text(
        "import sys, time\n"
        "from bench import gpu_check\n"
        "def check(args):\n"
        "    args.world_file.write_text('1\\n')\n"
        "    return gpu_check.row('check', True, 'faked', '-'), 0\n"
        "def mnist(args):\n"
        "    if args.strategy == 'ddp':\n"
        "        raise RuntimeError('injected: the worker broke')\n"
        "    print('injected: gone without a row', file=sys.stderr)\n"
        "    sys.exit(3)\n"
        "def finetune(args):\n"
        "    time.sleep(3600)\n"
        "gpu_check.STEPS.update(check=check, mnist=mnist, finetune=finetune)\n"
        "assert sys.argv[1:3] == ['-m', 'bench.gpu_check'], sys.argv\n"
        "sys.exit(gpu_check.main(sys.argv[3:]))\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{fake}" "$@"\n')
    python.chmod(0o755)
    started = time.monotonic()
    result = gpu_sh("--dry-run", "--json", str(tmp_path / "table.json"), timeout=120, PYTHON=str(python),
                    PYTHONPATH=str(ROOT), GPU_CHECK_BUDGET_SECONDS="25")
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 60  # the budget bounds the whole run
    rows = table_lines(result.stdout)
    assert list(rows) == STEPS
    assert rows["check"][2] == "ok"
    assert all(rows[name][2] == "FAILED" for name in STEPS[1:])
    assert "RuntimeError: injected: the worker broke" in rows["mnist-ddp"][4]
    assert "exit 3: injected: gone without a row" in rows["mnist-fsdp"][4]
    assert "timed out after" in rows["finetune"][4]
    assert "skipped: the 25 s budget was spent" in rows["sft"][4]
    assert "skipped" in rows["sft-hsdp"][4] and "skipped" in rows["stall"][4]
    written = json.loads((tmp_path / "table.json").read_text())
    assert [item["name"] for item in written["rows"]] == STEPS and written["dry_run"] is True


@pytest.mark.slow
@pytest.mark.onecore
def test_the_dry_run_runs_every_step_on_the_cpu_and_prints_one_table(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = gpu_sh("--dry-run", timeout=2400, OUT=str(out))  # $OUT: the table's JSON and the logs go there
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    rows = table_lines(result.stdout)
    assert list(rows) == STEPS
    assert all(rows[name][2] == "ok" for name in STEPS), result.stdout
    written = json.loads((out / "gpu-check.json").read_text())
    by_name = {item["name"]: item for item in written["rows"]}
    assert written["dry_run"] is True and written["machine"]["cuda_available"] is False
    for strategy in ("ddp", "fsdp"):  # the worker trained and evaluated, on the CPU: no CUDA peak recorded
        mnist = by_name[f"mnist-{strategy}"]["details"]
        assert mnist["device"] == "cpu" and 0 <= mnist["records"][-1]["accuracy"] <= 1
        assert mnist["records"][-1]["strategy"] == strategy and "cuda_peak_mib" not in mnist["records"][-1]
    finetune = by_name["finetune"]["details"]["finetune"]
    for contender in ("worker", "trainer"):
        assert finetune[contender]["tokens_per_second"] > 0 and 0 <= finetune[contender]["f1"] <= 100
        assert finetune[contender]["cuda_peak_mib"] is None
    sft = by_name["sft"]["details"]["sft"]
    assert sft["world"] == 1 and sft["trl"]["cuda_peak_mib"] is None
    for contender in ("worker", "trl"):
        assert sft[contender]["tokens_per_second"] > 0 and sft[contender]["peak_mib"] > 0
        assert 0 < sft[contender]["evaluation_loss"] < 20
    # a dry run's sft step is the comparison alone: the group's other rows run in tests/test_bench.py
    assert "sft_settings" not in by_name["sft"]["details"] and "shared_load" not in by_name["sft"]["details"]
    # the steps' results are bench.transformers' (the test suite's only run of these two groups): its table renders them
    from bench.transformers import table

    rendered = table({**by_name["finetune"]["details"], **by_name["sft"]["details"]})
    for line in ("tokens/s per process, ws 1, BERT 2x32", "time to macro F1 95, ws 1", "SFT tokens/s per process, ws 1",
                 "SFT peak resident memory per rank, ws 1", "SFT evaluation loss after"):
        assert line in rendered, rendered
    # examples/sft's settings, a full fine-tune under hsdp: every rank's shards written, and resumed by a second start
    hsdp = by_name["sft-hsdp"]["details"]
    assert "full fine-tune" in hsdp["start_line"] and " under hsdp" in hsdp["start_line"], hsdp["start_line"]
    assert hsdp["sharded_checkpoints"] and hsdp["resumed"].endswith(f"resuming from {hsdp['sharded_checkpoints'][-1]}")
    assert 0 < hsdp["summary"]["loss"] < 20
    stall = by_name["stall"]["details"]
    assert set(stall) == {"fsdp", "allreduce"} and all(figures["sync_blocked_s"] > 0 for figures in stall.values())
    assert sorted(path.name for path in (out / "gpu-check" / "logs").iterdir()) == sorted(f"{s}.log" for s in STEPS)
