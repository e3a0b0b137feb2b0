# shellcheck shell=bash
# Helpers shared by prepare.sh, run.sh and clean.sh. Sourced, never run.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
# run.sh --local's volumes, logs and status, one directory per Job (clean.sh --local removes it)
RUNS_DIR="${RUNS_DIR:-$ROOT/runs}"

die() {
  printf '%s: error: %s\n' "$(basename "$0")" "$*" >&2
  exit 1
}

info() {
  printf '%s: %s\n' "$(basename "$0")" "$*" >&2
}

# Print the command that runs the generator, installing it into .venv on first use.
find_generator() {
  if [[ -x "$ROOT/.venv/bin/gen-manifests" ]]; then
    printf '%s\n' "$ROOT/.venv/bin/gen-manifests"
  elif command -v gen-manifests >/dev/null 2>&1; then
    command -v gen-manifests
  else
    command -v python3 >/dev/null 2>&1 || die "python3 is required to install the generator"
    info "installing the generator into $ROOT/.venv (first run only)"
    python3 -m venv "$ROOT/.venv" >&2 || die "could not create $ROOT/.venv"
    "$ROOT/scripts/install.sh" "$ROOT/.venv/bin/python" "$ROOT" >&2 ||
      die "could not install the generator (scripts/install.sh .venv/bin/python $ROOT)"
    printf '%s\n' "$ROOT/.venv/bin/gen-manifests"
  fi
}

require_kubectl() {
  command -v kubectl >/dev/null 2>&1 ||
    die "kubectl is not installed; see https://kubernetes.io/docs/tasks/tools/ (or try the job on this machine: ./run.sh --local)"
  kubectl version --request-timeout=10s >/dev/null 2>&1 ||
    die "no Kubernetes cluster is reachable with the current kubeconfig (context: $(kubectl config current-context 2>/dev/null || echo none)); check 'kubectl cluster-info', or try the job on this machine: ./run.sh --local"
}

require_build() {
  [[ -f "$BUILD_DIR/4-job.yaml" ]] || die "no rendered manifests in $BUILD_DIR; run ./prepare.sh first"
}

require_batch_script() {
  [[ -f "$BUILD_DIR/job.sbatch" ]] || die "no batch script in $BUILD_DIR; run ./prepare.sh --target slurm first"
}

require_slurm() {
  command -v sbatch >/dev/null 2>&1 ||
    die "sbatch is not installed: run this on a Slurm login node (or try the job on this machine: ./run.sh --local)"
}

# One #SBATCH option of the rendered batch script (job-name, output), without running anything.
sbatch_option() {
  sed -n "s/^#SBATCH --$1=//p" "$BUILD_DIR/job.sbatch" | head -n 1
}

# Read one field of the rendered Job (name or namespace) without kubectl or a cluster.
job_field() {
  # A field of the rendered Job by its path, one argument per key (metadata name; spec template spec
  # serviceAccountName; metadata labels kueue.x-k8s.io/queue-name); empty when the Job does not set it.
  local python="python3"
  [[ -x "$ROOT/.venv/bin/python" ]] && python="$ROOT/.venv/bin/python"
  "$python" -c '
import sys, yaml
node = yaml.safe_load(open(sys.argv[1]))
for key in sys.argv[2:]:
    node = node.get(key) if isinstance(node, dict) else None
print("" if node is None else node)' "$BUILD_DIR/4-job.yaml" "$@"
}
