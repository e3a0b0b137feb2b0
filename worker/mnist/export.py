"""The built-in worker's export: what export.storage_uri uploads when training ends (EXPORT_DIR): the model's
weights, its summary, the per-epoch metrics and a model card, copied from OUTPUT_DIR. Torch-free: the launcher
writes it too, for a run that finished before an export was asked for."""

from __future__ import annotations

import json
from pathlib import Path

from trainer_contract.atomic import atomic_write
from trainer_runtime.metrics_file import METRICS_FILE
from worker.mnist import settings

CARD = "README.md"
EXPORTED = (settings.MODEL_WEIGHTS, settings.MODEL_SUMMARY, METRICS_FILE)


def model_card(summary: dict) -> str:
    accuracy = summary.get("accuracy")
    return "\n".join([
        f"# {summary.get('model', 'worker.mnist.model.MnistCNN')}",
        "",
        "Trained by indexed-trainer's built-in worker (python -m worker) on MNIST.",
        "",
        f"- test accuracy: {accuracy:.4f}" if isinstance(accuracy, float) else "- test accuracy: unknown",
        f"- epochs: {summary.get('epochs')}, world size: {summary.get('world_size')}, data: {summary.get('data')}",
        f"- finished: {summary.get('finished_at')}",
        "",
        "Load it with `worker.mnist.model.MnistCNN().load_state_dict(torch.load('model.pt', weights_only=True))`; `metrics.jsonl` holds one "
        "record per epoch and `model.json` the run's settings.",
        "",
    ])


def write_export(output_dir: Path, export_dir: Path) -> list[str]:
    """Copy the finished run's files of ``output_dir`` into ``export_dir`` with a model card; the names written."""
    summary = json.loads((output_dir / settings.MODEL_SUMMARY).read_text())
    written = []
    for name in EXPORTED:
        source = output_dir / name
        if source.is_file():
            atomic_write(export_dir / name, source.read_bytes())
            written.append(name)
    atomic_write(export_dir / CARD, model_card(summary).encode())
    return [*written, CARD]
