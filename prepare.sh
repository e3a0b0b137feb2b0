#!/usr/bin/env bash
# Render and validate the manifests into build/, replacing the previous render only if this one succeeds.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/common.sh"

usage() {
  cat <<USAGE
Usage: ./prepare.sh [GEN-MANIFESTS OPTIONS]

Renders variables/variables.json (plus any --values FILE, --set KEY=VALUE, --set-string KEY=VALUE given
here) into $BUILD_DIR/, one file per object, or with --target slurm into $BUILD_DIR/job.sbatch.
Installs the generator into .venv on first use. On invalid values nothing in $BUILD_DIR changes.
Then: ./run.sh (cluster), ./run.sh --local (this machine) or ./run.sh --slurm (Slurm).

Examples:
  ./prepare.sh
  ./prepare.sh --set replicas=4 --set config_map.EPOCHS=5
  ./prepare.sh --values my-gpu-values.yaml
  ./prepare.sh --target slurm --set slurm.partition=gpu --set slurm.shared_dir=/scratch/me/mnist
USAGE
}

target=kubernetes
previous=""
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    -o | --output-dir | --output-dir=*) die "the output is always $BUILD_DIR (set BUILD_DIR to change it)" ;;
    --target=*) target="${arg#--target=}" ;;
  esac
  [[ "$previous" == "--target" ]] && target="$arg"
  previous="$arg"
done

generator="$(find_generator)"
staging="$(mktemp -d "${BUILD_DIR%/}.tmp.XXXXXX")"
trap 'rm -rf -- "$staging" "${BUILD_DIR%/}.old"' EXIT

status=0
errors="$("$generator" --values "$ROOT/variables/variables.json" "$@" --output-dir "$staging" 2>&1 >/dev/null)" ||
  status=$?
if [[ $status -ne 0 ]]; then
  printf '%s\n' "$errors" >&2
  info "nothing changed in $BUILD_DIR; fix the values above"
  exit "$status"
fi
grep '^gen-manifests: warning' <<<"$errors" >&2 || true  # values ignored on Slurm

# Swap the whole directory: readers see the old render or the new one, never a mix.
# The other target's render stays: a Slurm render must not delete the Kubernetes one, nor the reverse.
kept=""
if [[ -d "$BUILD_DIR" ]]; then
  if [[ "$target" == slurm ]]; then others=("$BUILD_DIR"/*.yaml); else others=("$BUILD_DIR"/job.sbatch); fi
  for file in "${others[@]}"; do
    if [[ -f "$file" ]]; then cp -p -- "$file" "$staging/"; kept="$kept ${file##*/}"; fi
  done
fi
rm -rf -- "${BUILD_DIR%/}.old"
[[ -d "$BUILD_DIR" ]] && mv -- "$BUILD_DIR" "${BUILD_DIR%/}.old"
mv -- "$staging" "$BUILD_DIR"
[[ -z "$kept" ]] || info "kept the other target's earlier render:$kept"
if [[ "$target" == slurm ]]; then
  info "rendered $BUILD_DIR/job.sbatch"
  info "next: ./run.sh --slurm (submit it with sbatch and wait)"
else
  info "rendered into $BUILD_DIR: $(cd "$BUILD_DIR" && echo *.yaml)"
  info "next: ./run.sh (apply to the cluster) or ./run.sh --local (run on this machine)"
fi
