#!/usr/bin/env bash
# What has never run on a GPU here, in one go of under 9 minutes on a machine with NVIDIA GPUs (one or more, all
# used), ending with one table (docs/performance.md, "On a GPU"). Run from anywhere; the repository's .venv runs it.
#
#   bash bench/gpu.sh [--json PATH] [--dry-run]
#
# Steps, each bounded by `timeout`, each a row of the table (bench/gpu_check.py): the GPU, its capability, bf16 and
# NCCL (no GPU: one line and exit 1 at once); the MNIST worker under the launcher, ddp then fsdp, bf16, to 99%;
# worker.finetune against Hugging Face's Trainer and worker.sft against TRL (bench/transformers.py at its gpu size);
# examples/sft's settings as a full fine-tune under hsdp on NCCL, resumed from its shards; the checkpoint stall on
# the GPU (its fsdp row: the asynchronous sharded save, every rank's shards staged in pinned host memory, each rank
# hashing its own). Each training row gives its peak CUDA memory per rank. A failing step says why in
# its row and the next one runs; the exit status is 1 if any row failed.
#
#   --json PATH   also write the table as JSON there (default: $OUT/gpu-check.json where $OUT is set, else beside
#                 the logs in a new directory under ${TMPDIR:-/tmp}; the steps' logs go beside it either way)
#   --dry-run     every step on the CPU at the tiniest size (also GPU_CHECK_DRY_RUN=1; sft: the comparison with TRL
#                 alone): the wiring, tested here without a GPU by tests/test_gpu_check.py; its figures
#                 mean nothing
#
# GPU_CHECK_BUDGET_SECONDS bounds all the steps together: 480 by default, so that with the table the whole run stays
# under 9 minutes (a dry run: 1800, and 5 times each step's limit: the tiniest runs take minutes on a busy 2-core CPU).
# PYTHON runs the steps: by default the repository's .venv/bin/python, else python3 (a lent machine may have torch
# installed system-wide and no .venv).
set -euo pipefail

usage() {  # the comment above, without its hashes
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

dry_run="${GPU_CHECK_DRY_RUN:-0}"
json=""
while (($#)); do
    case "$1" in
        --dry-run) dry_run=1 ;;
        --json) json="${2:?--json needs a path}"; shift ;;
        --json=*) json="${1#--json=}" ;;
        -h | --help) usage; exit 0 ;;
        *) echo "gpu.sh: unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [[ -n "$json" && "$json" != /* ]]; then
    json="$PWD/$json"  # the caller's directory, not the repository's below
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-.venv/bin/python}"
if [[ -z "${PYTHON:-}" && ! -x "$python" ]] && command -v python3 >/dev/null; then
    python="$(command -v python3)"
fi
if [[ ! -x "$python" ]]; then
    echo "gpu.sh: no $python: install first (scripts/install.sh .venv/bin/python -e '.[worker,staging,lightning,hf,replicas,bench,test]')" >&2
    exit 1
fi

if [[ -n "${OUT:-}" ]]; then
    work="$OUT/gpu-check"  # the device tool brings $OUT back: the logs come with the table
    json="${json:-$OUT/gpu-check.json}"
else
    work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
    json="${json:-$work/gpu-check.json}"
fi
rows="$work/rows"
logs="$work/logs"
mkdir -p "$rows" "$logs"
rm -f -- "$rows"/*.json "$rows"/*.reason "$work/world"  # an earlier run's rows must not pass for this one's
# Models, data and checkpoints (768 MiB each) go to a scratch directory removed at the end, never to $OUT.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-scratch.XXXXXX")"
trap 'rm -rf -- "$scratch"' EXIT
export TMPDIR="$scratch"

flags=()
scale=1
budget="${GPU_CHECK_BUDGET_SECONDS:-480}"
if [[ "$dry_run" == 1 ]]; then
    flags=(--dry-run)
    scale=5
    budget="${GPU_CHECK_BUDGET_SECONDS:-1800}"
    export CUDA_VISIBLE_DEVICES=""  # the CPU even where a GPU is: a dry run tests the wiring, not the card
fi

deadline=$((SECONDS + budget))
steps=()

last_line() {
    grep -v '^[[:space:]]*$' "$1" | tail -n 1 | cut -c 1-240
}

# run_step NAME LIMIT GPU_CHECK_ARGS...: one step under `timeout`, its output in $logs/NAME.log; where it leaves
# no row (a timeout, a crash), $rows/NAME.reason says why for the table. Returns the step's exit status.
run_step() {
    local name="$1" limit=$(($2 * scale)) left status=0
    shift 2
    steps+=("$name")
    left=$((deadline - SECONDS - 5))  # 5 s for timeout's kill
    if ((left < 10)); then
        echo "skipped: the ${budget} s budget was spent before it could start" >"$rows/$name.reason"
        return 1
    fi
    ((limit <= left)) || limit="$left"
    echo "gpu.sh: $name (at most ${limit} s; log: $logs/$name.log)" >&2
    timeout --kill-after=5 "$limit" "$python" -m bench.gpu_check "$@" --row "$rows/$name.json" "${flags[@]}" \
        >"$logs/$name.log" 2>&1 || status=$?
    if ((status == 124 || status == 137)); then
        rm -f -- "$rows/$name.json"
        echo "timed out after ${limit} s (log: $logs/$name.log)" >"$rows/$name.reason"
    elif ((status != 0)) && [[ ! -s "$rows/$name.json" ]]; then
        echo "exit ${status}: $(last_line "$logs/$name.log")" >"$rows/$name.reason"
    fi
    return "$status"
}

status=0
run_step check 45 check --world-file "$work/world" || status=$?
if ((status != 0 && status != 1)) || [[ ! -s "$work/world" ]]; then
    # no GPU (2), or the check itself broke: nothing after it can run
    if [[ -s "$rows/check.reason" ]]; then
        echo "gpu.sh: the check failed: $(<"$rows/check.reason")" >&2
    else
        echo "gpu.sh: $(last_line "$logs/check.log")" >&2
    fi
    exit 1
fi
world="$(<"$work/world")"

run_step mnist-ddp 60 mnist --strategy ddp --world "$world" || true
run_step mnist-fsdp 60 mnist --strategy fsdp --world "$world" || true
run_step finetune 105 finetune --world "$world" || true
run_step sft 105 sft --world "$world" || true
run_step sft-hsdp 75 sft-hsdp --world "$world" || true
run_step stall 60 stall --world "$world" || true

steps_list="$(IFS=,; echo "${steps[*]}")"
timeout 30 "$python" -m bench.gpu_check table --rows "$rows" --steps "$steps_list" --json "$json" "${flags[@]}"
