"""Warnings from the model's size, for every target: where initializer.model.weights_gib says how large the staged
weights are and the program is a built-in workload (whose settings say how it loads, checkpoints and exports), the
render says what will not fit before a pod runs out of room hours into a job. Warnings, not refusals: the estimates
are rules of thumb (below), and a user may know better.

- Each process of a pod loads the whole model into host memory (from_pretrained reads it before it moves to a GPU):
  the processes per pod times the weights, against resources.memory.
- The shared volume holds the staged model, KEEP_CHECKPOINTS checkpoints (and the best, with METRIC_FOR_BEST_MODEL) (a full fine-tune's: the weights and
  AdamW's two moments, in the weights' own dtype, about three times the weights; LoRA's: the adapters, a few MiB)
  and the export (the weights, or under LoRA the adapters, and the merged model with EXPORT_MERGED), against
  shared_volume.size where the render makes the volume (an existing claim's size is not known here; Slurm's
  shared directory has none).
- STRATEGY=fsdp (or hsdp) with LoRA on GPUs, for weights one GPU holds with room to spare (FITS_ONE_GPU_GIB): ddp
  keeps a frozen copy per GPU and all-reduces only the adapters' gradients, where fsdp all-gathers the frozen base
  at every step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from generator.spec import JobSpec

# Under half of an 80 GB GPU: the frozen base, LoRA's activations and optimizer state fit beside it.
FITS_ONE_GPU_GIB = 40.0
FULL_CHECKPOINT_TIMES_WEIGHTS = 3  # the weights and AdamW's two moments, in the weights' dtype
# The targets whose render makes the shared volume, of shared_volume.size.
SIZED_VOLUME_TARGETS = frozenset({"kubernetes", "local"})


def warnings(values: Mapping[str, Any], spec: JobSpec, target: str) -> Iterable[str]:
    weights = ((values.get("initializer") or {}).get("model") or {}).get("weights_gib")
    config = spec.program_config()
    if weights is None or config is None or not hasattr(config, "model_dir"):  # MNIST's: no pretrained model
        return
    lora = getattr(config, "lora_rank", 0) > 0
    yield from _memory(weights, spec)
    volume = values.get("shared_volume") or {}
    if target in SIZED_VOLUME_TARGETS and volume.get("existing_claim") is None:
        yield from _volume(weights, float(volume["size"]), config, lora)
    if lora and spec.gpus and config.strategy in ("fsdp", "hsdp") and weights <= FITS_ONE_GPU_GIB:
        yield (f"STRATEGY={config.strategy} with LoRA on a model of {weights:g} GiB (initializer.model.weights_gib), "
               f"which one GPU holds (up to {FITS_ONE_GPU_GIB:g} GiB: under half of an 80 GB GPU): ddp keeps a frozen "
               "copy on each GPU and all-reduces only the adapters' gradients, where fsdp all-gathers the frozen base "
               f"at every step{' across the nodes' if spec.replicas > 1 else ''}; set config_map.STRATEGY: ddp unless "
               "the GPUs are smaller")


def _memory(weights: float, spec: JobSpec) -> Iterable[str]:
    need = spec.procs_per_node * weights
    if need > spec.memory_gib:
        yield (f"each of a pod's {spec.procs_per_node} processes loads the whole model (initializer.model.weights_gib "
               f"{weights:g} GiB) into host memory before it moves to a GPU: {need:g} GiB at once, over "
               f"resources.memory {spec.memory_gib:g} GiB; raise resources.memory")


def _volume(weights: float, size: float, config: Any, lora: bool) -> Iterable[str]:
    # the best evaluation's checkpoint is kept beside the newest KEEP_CHECKPOINTS (METRIC_FOR_BEST_MODEL)
    keep = config.keep_checkpoints + (getattr(config, "metric_for_best_model", "none") != "none")
    checkpoints = 0.0 if lora else keep * FULL_CHECKPOINT_TIMES_WEIGHTS * weights
    export = weights if not lora or getattr(config, "export_merged", False) else 0.0
    need = weights + checkpoints + export
    if need > size:
        kept = (f"{keep} checkpoint(s) of about {FULL_CHECKPOINT_TIMES_WEIGHTS * weights:g} GiB (KEEP_CHECKPOINTS"
                f"{' and the best, METRIC_FOR_BEST_MODEL' if keep > config.keep_checkpoints else ''}; the weights and "
                "AdamW's two moments)") if checkpoints else "LoRA's checkpoints (the adapters)"
        yield (f"the shared volume holds the staged model ({weights:g} GiB), {kept} and the export "
               f"({export:g} GiB): about {need:g} GiB, over shared_volume.size {size:g} GiB; raise it")
