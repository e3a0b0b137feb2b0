#!/usr/bin/env bash
# Delete what run.sh created: the Job with its pods, the Service, the NetworkPolicy and the ConfigMaps (the
# volume with --all);
# with --local, what run.sh --local created.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/common.sh"

usage() {
  cat <<USAGE
Usage: ./clean.sh [--all] | --local [--all] [MANIFESTS] | --slurm

Deletes the Job (waiting for its pods to go), the Service (and NetworkPolicy) rendered in $BUILD_DIR/ and every ConfigMap
of the job (each render with other settings made a new, immutable one named by its content). The
PersistentVolumeClaim holds the downloaded data, the checkpoints and the trained model, so it is kept
unless --all is given. With --slurm, cancels the Slurm jobs of $BUILD_DIR/job.sbatch (by its job
name, yours only); the shared directory keeps the data, checkpoints and model.

With --local, removes everything local-job keeps for the Job of $BUILD_DIR/ (or of MANIFESTS, as given
to local-job): run.sh --local's $RUNS_DIR/<job>/ and local-job's own state directory for the Job
(~/.local/state/local-job/<namespace>/<job>): volumes (checkpoints, snapshots, outputs: a new run then
starts from the beginning), logs and status, keeping each volume's data/ (the downloaded MNIST); with
--local --all, data/ too. Each thing removed is named. Refused while the Job runs locally.
USAGE
}

remove_volume=false
local_run=false
manifests=""
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
    -*) die "unknown option '$1' (see --help)" ;;
    *)
      [[ "$local_run" == true && -z "$manifests" ]] || die "unexpected argument '$1' (see --help)"
      manifests="$1"; shift ;;
  esac
done

if [[ "$local_run" == true ]]; then
  keep=(--keep-data)
  [[ "$remove_volume" == true ]] && keep=()
  local_job="$(dirname "$(find_generator)")/local-job"
  if [[ -n "$manifests" ]]; then
    "$local_job" clean "$manifests" "${keep[@]}"
    exit
  fi
  require_build
  # run.sh --local's volume root, then local-job's default one (a local-job build/ run by hand)
  "$local_job" clean "$BUILD_DIR" --volume-root "$RUNS_DIR/$(job_field metadata name)" "${keep[@]}"
  "$local_job" clean "$BUILD_DIR" "${keep[@]}"
  exit
fi
require_build
require_kubectl
# Foreground cascade: the Job is gone only once its pods are, so a new run never meets old pods.
kubectl delete --ignore-not-found --wait=true --cascade=foreground -f "$BUILD_DIR/4-job.yaml"
# The stage Job of its own (initializer.separate_job), and its pod.
if [[ -f "$BUILD_DIR/4-stage-job.yaml" ]]; then
  kubectl delete --ignore-not-found --wait=true --cascade=foreground -f "$BUILD_DIR/4-stage-job.yaml"
fi
kubectl delete --ignore-not-found --wait=true -f "$BUILD_DIR/3-service.yaml"
# Replica groups: the Lighthouse (its Deployment, then its Service), once no group is left to ask it.
for lighthouse in 3-lighthouse-deployment.yaml 3-lighthouse-service.yaml; do
  if [[ -f "$BUILD_DIR/$lighthouse" ]]; then
    kubectl delete --ignore-not-found --wait=true -f "$BUILD_DIR/$lighthouse"
  fi
done
# The NetworkPolicies (network_policy.enabled) go once no pod of the job is left under them.
for policy in 0-networkpolicy.yaml 0-lighthouse-networkpolicy.yaml; do
  if [[ -f "$BUILD_DIR/$policy" ]]; then
    kubectl delete --ignore-not-found --wait=true -f "$BUILD_DIR/$policy"
  fi
done
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
