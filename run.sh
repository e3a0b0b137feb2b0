#!/usr/bin/env bash
# Apply the rendered manifests to the cluster (or run the Job on this machine with --local).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/common.sh"

usage() {
  cat <<USAGE
Usage: ./run.sh [--local [LOCAL-JOB OPTIONS] | --slurm | --status | --slurm --status | --scale N]

Applies $BUILD_DIR/ (rendered by ./prepare.sh) with kubectl, in the namespace the values name, and
says how to follow the training.
  --local   run the Job's pods as processes on this machine instead (no cluster needed), with the
            volumes under runs/<job>/; options after it go to local-job, e.g.
            --volume <job>-data=DIR   use DIR (holding data/MNIST/raw/...) as the shared volume
  --slurm   submit $BUILD_DIR/job.sbatch (./prepare.sh --target slurm) with sbatch from the current
            directory, say how to follow it, and wait for it: while it is pending, why (squeue's reason
            and the values key to change); the exit code is the job's, as with sbatch --wait
  --status  show the applied Job on the cluster: its conditions, each index's pods with their exit codes
            (and what each means) and termination messages, what a Job or pod waits for (and the values
            key to change), and index 0's latest progress line
  --slurm --status
            the same for the Slurm jobs of $BUILD_DIR/job.sbatch (by its job name): each one's state and,
            while pending, squeue's reason and the values key to change
  --local --status
            the same for the running (or last) local run: progress and ETA, each index's pods, warnings
            and the last error
  --scale N
            a running Job of replica groups (fault_tolerance.max_replicas) to N groups: its completions and
            parallelism patched together (Kubernetes 1.27 or later); new indexes join the next quorum,
            removed ones (the highest) leave between two steps
  --local --scale N
            the same for the running local run (local-job scale N)
USAGE
}

local_run=false
slurm_run=false
local_args=()
scale_to=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --local) local_run=true; shift; local_args=("$@"); break ;;
    --slurm) slurm_run=true; shift ;;
    --status)
      if [[ "${2:-}" == --local ]]; then local_run=true; local_args=(--status); break; fi
      if [[ "$slurm_run" == true || "${2:-}" == --slurm ]]; then
        require_batch_script
        require_slurm
        bin_dir="$(dirname "$(find_generator)")"
        exec "$bin_dir/python" -m status_views.slurm --name "$(sbatch_option job-name)"
      fi
      require_build
      require_kubectl
      bin_dir="$(dirname "$(find_generator)")"
      exec "$bin_dir/python" -m status_views.kubernetes "$(job_field metadata namespace)" "$(job_field metadata name)" ;;
    --scale)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--scale needs the number of groups: ./run.sh --scale N"
      scale_to="$2"; shift 2 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

if [[ -n "$scale_to" && "$local_run" == true ]]; then
  local_args=(--scale "$scale_to")
elif [[ -n "$scale_to" ]]; then
  [[ "$slurm_run" == false ]] || die "--scale: a Slurm allocation does not grow or shrink while it runs"
  require_build
  require_kubectl
  bin_dir="$(dirname "$(find_generator)")"
  # the patch and its bounds from the rendered Job (generator/scale.py): it says why when it cannot
  patch="$("$bin_dir/python" -m generator.scale "$BUILD_DIR" "$scale_to")" || exit 2
  name="$(job_field metadata name)"
  namespace="$(job_field metadata namespace)"
  kubectl -n "$namespace" patch job "$name" --type=merge -p "$patch" ||
    die "Job $namespace/$name was not scaled (see above): it must exist and not have finished; a cluster older than Kubernetes 1.27 refuses a change of completions"
  info "Job $namespace/$name scaled to $scale_to replica groups: new indexes' pods join the next quorum with a peer's state, removed indexes' pods leave between two steps (exit 82, not counted)"
  exit 0
fi

if [[ "$slurm_run" == true ]]; then
  require_batch_script
  require_slurm
  name="$(sbatch_option job-name)"
  log_dir="$(dirname "$(sbatch_option output)")"
  # sbatch opens the log files before the script runs: their directory must exist
  mkdir -p -- "$log_dir" || die "cannot create the log directory $log_dir"
  cat >&2 <<NEXT
run.sh: submitting Job $name to Slurm from $(pwd); follow it with:
  squeue --name=$name
  tail -f $log_dir/$name-<job id>.out
  ./run.sh --slurm --status    # its state; while pending, why and the values key to change
Cancel it with ./clean.sh --slurm. Waiting for it to end (Ctrl-C stops waiting, not the job)...
NEXT
  bin_dir="$(dirname "$(find_generator)")"
  submitted="$(sbatch --parsable "$BUILD_DIR/job.sbatch")" || die "sbatch did not accept the job (see above)"
  job_id="${submitted%%;*}"  # --parsable: ID or ID;CLUSTER
  info "submitted Slurm job $job_id"
  # polls scontrol every 5 s, saying its state and, while pending, squeue's reason with the key to
  # change; exits with the job's exit code as sbatch --wait does
  status=0
  "$bin_dir/python" -m status_views.slurm --wait "$job_id" || status=$?
  info "Job $name ended with exit code $status"
  exit "$status"
fi

require_build
if [[ "$local_run" == true ]]; then
  name="$(job_field metadata name)"
  bin_dir="$(dirname "$(find_generator)")"
  root="$RUNS_DIR/$name"
  if [[ "${local_args[0]:-}" == --status ]]; then
    exec "$bin_dir/local-job" status --volume-root "$root"
  fi
  if [[ "${local_args[0]:-}" == --scale ]]; then
    exec "$bin_dir/local-job" scale --volume-root "$root" "${local_args[@]:1}"
  fi
  if ! "$bin_dir/python" -c 'import torch, torchvision' >/dev/null 2>&1; then
    info "installing the worker (PyTorch) into $(dirname "$bin_dir") for the local pods (first run only)"
    "$ROOT/scripts/install.sh" "$bin_dir/python" "${ROOT}[worker]" >&2 ||
      die "could not install the worker: scripts/install.sh $bin_dir/python '${ROOT}[worker]'"
  fi
  local_job="$bin_dir/local-job"
  info "running Job $name on this machine; volumes and logs in $root"
  # A container sees its image, not the directory it was started from: the pods start in an empty folder
  # standing for the image's WORKDIR, so the installed worker runs and never a worker/ of the current
  # directory. Your own program's files: --image-dir DIR (given after --local, it wins).
  mkdir -p -- "$root/image"
  status=0
  # As an image's ENV would: on this machine, the built-in worker may fall back to the MNIST sample it ships
  # when the full set cannot be downloaded (no network); on a cluster it downloads the full set or fails.
  # Run as root, local-job starts the pods as their securityContext's user (uid 10001) where that user can
  # reach this checkout's Python and the volumes; where it cannot (a Python under root's home), this quick start
  # runs them as root, and local-job says so in its first lines (local-job alone refuses: --allow-root).
  allow_root=()
  if [[ "$(id -u)" == 0 ]]; then allow_root=(--allow-root); fi
  "$local_job" "$BUILD_DIR" --volume-root "$root" --status-file "$root/status.json" --image-dir "$root/image" \
    --env MNIST_SAMPLE_FALLBACK=true "${allow_root[@]}" "${local_args[@]}" || status=$?
  # 2: local-job refused before any pod started (it said why); the logs and status there are an earlier run's
  if [[ "$status" != 2 ]]; then
    info "pod logs: $root/logs/; Job status: ./run.sh --local --status (or $root/status.json)"
  fi
  exit "$status"
fi

# wait_for_stage NAMESPACE JOB: until the Job completes (0) or fails or is gone (1): waited on in turns of
# kubectl wait (a watch, not a poll), each turn ended by a look for its failure and a line of how long it has taken.
wait_for_stage() {
  local began=$SECONDS failed
  until kubectl -n "$1" wait --for=condition=complete --timeout=60s "job/$2" >/dev/null 2>&1; do
    failed="$(kubectl -n "$1" get "job/$2" -o 'jsonpath={.status.conditions[?(@.type=="Failed")].status}' 2>&1)" ||
      return 1
    [[ "$failed" != True ]] || return 1
    info "Job $1/$2 still staging ($((SECONDS - began)) s); ./run.sh --status shows its pod"
  done
}

# stage_failure NAMESPACE JOB: the Job's Failed condition, in a line.
stage_failure() {
  kubectl -n "$1" get "job/$2" -o 'jsonpath={.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}' 2>/dev/null ||
    echo "its status could not be read"
}

require_kubectl
name="$(job_field metadata name)"
namespace="$(job_field metadata namespace)"
# What the cluster must already have, or the Job is created and never gets a pod (only events say why):
# checked before anything is applied, every problem on its own line.
problems=()
# check ABSENT ARGS...: `kubectl ARGS` (a get); ABSENT is the problem when the API server says NotFound. Any other
# refusal (Forbidden: the submitter's account may not read that kind; no connection) is its own problem, in
# kubectl's words: "does not exist" would be a guess.
check() {
  local absent="$1" output
  shift
  output="$(kubectl "$@" 2>&1 >/dev/null)" && return 0
  if [[ "$output" == *"(NotFound)"* || -z "$output" ]]; then
    problems+=("$absent")
  elif [[ "$output" == *"(Forbidden)"* ]]; then
    problems+=("cannot check what the Job needs: kubectl $* was refused: $(head -n 1 <<<"$output"); ask your cluster admin for read access to it, or check it yourself")
  else
    problems+=("cannot check what the Job needs: kubectl $* failed: $(head -n 1 <<<"$output")")
  fi
  return 1
}
check "namespace '$namespace' does not exist; create it (kubectl create namespace $namespace) or set namespace in the values" \
  get namespace "$namespace" || true
account="$(job_field spec template spec serviceAccountName)"
if [[ -n "$account" && ${#problems[@]} -eq 0 ]]; then
  check "service_account_name '$account' is not a ServiceAccount of namespace $namespace; create it (kubectl -n $namespace create serviceaccount $account) or set service_account_name: null" \
    -n "$namespace" get serviceaccount "$account" || true
fi
priority="$(job_field spec template spec priorityClassName)"
if [[ -n "$priority" ]]; then
  check "priority_class_name '$priority' is not a PriorityClass of this cluster (kubectl get priorityclasses lists them); create it or set priority_class_name: null" \
    get priorityclass "$priority" || true
fi
queue="$(job_field metadata labels kueue.x-k8s.io/queue-name)"
if [[ -n "$queue" ]]; then
  if check "queue_name '$queue' needs Kueue, which this cluster does not have (no CRD localqueues.kueue.x-k8s.io): the Job would stay suspended; install Kueue or set queue_name: null" \
      get crd localqueues.kueue.x-k8s.io && [[ ${#problems[@]} -eq 0 ]]; then
    check "queue_name '$queue' is not a LocalQueue of namespace $namespace (kubectl -n $namespace get localqueues lists them); create it or set queue_name to one that exists" \
      -n "$namespace" get localqueues.kueue.x-k8s.io "$queue" || true
  fi
fi
if ((${#problems[@]})); then
  for problem in "${problems[@]}"; do
    echo "run.sh: error: $problem" >&2
  done
  die "nothing was applied; fix the above and run ./run.sh again"
fi
# The files are numbered in apply order: claim, ConfigMap, Service, then the Job. With a stage Job of its own
# (initializer.separate_job), everything but the training Job first, then that Job once the stage Job completed:
# no GPU is held while the model and data download.
training=(-f "$BUILD_DIR")
if [[ -f "$BUILD_DIR/4-stage-job.yaml" ]]; then
  stage="$name-stage"
  first=()
  for file in "$BUILD_DIR"/*.yaml; do
    [[ "$file" == "$BUILD_DIR/4-job.yaml" ]] || first+=(-f "$file")
  done
  kubectl apply "${first[@]}" || die "kubectl apply failed (see above)"
  info "Job $namespace/$stage stages the model and data; Job $name is applied once it completes. Its log:"
  info "  kubectl -n $namespace logs -f job/$stage"
  wait_for_stage "$namespace" "$stage" || die "Job $namespace/$stage did not complete: $(stage_failure "$namespace" \
"$stage"); see its log (kubectl -n $namespace logs job/$stage), fix the cause, then ./clean.sh and ./run.sh again"
  info "Job $namespace/$stage complete"
  training=(-f "$BUILD_DIR/4-job.yaml")
fi
if ! kubectl apply "${training[@]}"; then
  if kubectl -n "$namespace" get job "$name" >/dev/null 2>&1; then
    die "Job $namespace/$name already exists and a Job's pod template cannot change: it keeps the settings it \
started with. To run with the new ones, ./clean.sh first (the volume keeps the data and checkpoints; a \
changed training setting then needs RESUME=false or another OUTPUT_DIR)"
  fi
  die "kubectl apply failed (see above)"
fi
cat >&2 <<NEXT
run.sh: Job $namespace/$name submitted. Follow it with:
  kubectl -n $namespace get pods -l app.kubernetes.io/instance=$name -w
  kubectl -n $namespace logs -f -l app.kubernetes.io/instance=$name,batch.kubernetes.io/job-completion-index=0
  kubectl -n $namespace wait --for=condition=complete --timeout=1h job/$name
  ./run.sh --status     # conditions, each index's pods and exit codes, index 0's latest progress
Remove it with ./clean.sh (the data volume stays; ./clean.sh --all removes it too).
NEXT
