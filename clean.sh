#!/usr/bin/env bash
# Delete what run.sh created: the Job with its pods, the Service and the ConfigMaps (the volume with --all);
# with --local, what run.sh --local created.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/common.sh"

usage() {
  cat <<USAGE
Usage: ./clean.sh [--all] [--local] | --slurm

Deletes the Job (waiting for its pods to go), the Service rendered in $BUILD_DIR/ and every ConfigMap
of the job (each render with other settings made a new, immutable one named by its content). The
PersistentVolumeClaim holds the downloaded data, the checkpoints and the trained model, so it is kept
unless --all is given. With --slurm, cancels the Slurm jobs of $BUILD_DIR/job.sbatch (by its job
name, yours only); the shared directory keeps the data, checkpoints and model.

With --local, removes the local run of run.sh --local in $RUNS_DIR/<job>/: its logs, status and
outputs (checkpoints, metrics, model: a new run then starts from the beginning), keeping the downloaded
data; with --local --all, the whole directory.
USAGE
}

remove_volume=false
local_run=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --all) remove_volume=true; shift ;;
    --local) local_run=true; shift ;;
    --slurm)
      require_batch_script
      require_slurm
      name="$(sbatch_option job-name)"
      scancel --name="$name" --user="$(id -un)"
      info "cancelled the Slurm jobs named $name (the shared directory keeps data, checkpoints and model)"
      exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

require_build
if [[ "$local_run" == true ]]; then
  name="$(job_field metadata name)"
  root="$RUNS_DIR/$name"
  if [[ ! -d "$root" ]]; then
    info "nothing to remove: Job $name has no local run in $root"
    exit 0
  fi
  if [[ "$remove_volume" == true ]]; then
    rm -rf -- "$root"
    info "removed the local run of Job $name: $root (volumes with the data, logs, status)"
    exit 0
  fi
  # everything but each claim's downloaded data (DATA_DIR's default, data/ on the volume)
  find "$root" -mindepth 1 -maxdepth 1 ! -name volumes -exec rm -rf -- {} +
  if [[ -d "$root/volumes" ]]; then
    find "$root/volumes" -mindepth 2 -maxdepth 2 ! -name data -exec rm -rf -- {} +
  fi
  info "removed the local run of Job $name (logs, status, checkpoints, metrics, model); kept the data in" \
    "$root/volumes/*/data (./clean.sh --local --all removes it too)"
  exit 0
fi
require_kubectl
# Foreground cascade: the Job is gone only once its pods are, so a new run never meets old pods.
kubectl delete --ignore-not-found --wait=true --cascade=foreground -f "$BUILD_DIR/4-job.yaml"
kubectl delete --ignore-not-found --wait=true -f "$BUILD_DIR/3-service.yaml"
# The ConfigMaps of earlier renders too: they carry the job's instance label and the config component.
name="$(job_field metadata name)"
namespace="$(job_field metadata namespace)"
kubectl delete configmap --ignore-not-found --wait=true -n "$namespace" \
  -l "app.kubernetes.io/instance=$name,app.kubernetes.io/component=config"
if [[ "$remove_volume" == true && -f "$BUILD_DIR/1-persistentvolumeclaim.yaml" ]]; then
  kubectl delete --ignore-not-found --wait=true -f "$BUILD_DIR/1-persistentvolumeclaim.yaml"
elif [[ -f "$BUILD_DIR/1-persistentvolumeclaim.yaml" ]]; then
  info "kept the volume claim (data, checkpoints, model); ./clean.sh --all deletes it"
fi
