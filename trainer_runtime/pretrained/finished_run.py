"""The finished run of a program that fine-tunes a pretrained model (worker.qa, worker.finetune, worker.sft):
OUTPUT_DIR/summary.json, which rank 0 writes last, after the export, with the run's record (run_identity: the
model's, tokenizer's and data's revisions and the shaping settings). Another model, data or shaping setting is
another run: refused as a resume of its checkpoint would be. Torch-free: the launcher reads it before any
rendezvous."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from trainer_runtime.finished_run import FinishedRun, read_summary
from trainer_runtime.pretrained import run_identity
from trainer_runtime.pretrained.export import SUMMARY_FILE

# The scores the programs' evaluations report (worker.qa, worker.finetune, worker.sft), in the order said
SCORES = ("exact_match", "f1", "accuracy", "loss", "perplexity")
# What a finished run's summary.json holds of its record (run_identity.record) and its end, by type
RECORD_FIELDS = {"config": dict, "model_revision": str, "tokenizer_revision": str, "world_size": int, "step": int}


class PretrainedRun(FinishedRun):
    def summary(self) -> dict[str, Any] | None:
        summary = read_summary(self.output_dir() / SUMMARY_FILE)
        if summary is None or not all(isinstance(summary.get(key), kind) for key, kind in RECORD_FIELDS.items()) \
                or not isinstance(summary.get("content_revisions", {}), dict):
            return None  # none, or not a finished run's record (a file on the volume is data: its shape is checked)
        return summary

    def problems(self, summary: dict[str, Any]) -> list[str]:
        """As a resume of the run's last checkpoint is refused (run_identity.changes), but for the number of
        processes: a finished run is as finished on any."""
        what = f"the finished run in {self.config.output_dir}"
        reading = ("MODEL_DIR", self.config.model_dir)
        try:
            now = run_identity.record(self.config, summary["world_size"])
            if "data_revision" in summary:  # the workload records its data
                reading = ("DATASET_DIR", self.config.dataset_dir)
                now["data_revision"] = run_identity.data_revision(self.config.dataset_dir)
        except OSError as error:  # unreadable (a read's error names no file): nothing to compare the run with
            variable, directory = reading
            return [f"{variable}: {what} cannot be compared with {directory} ({error.strerror}); stage the model (and "
                    "data) it was trained on, or start a new run with another OUTPUT_DIR or RESUME=false"]
        return run_identity.changes(summary, now, what, self.config)

    def achieved(self, summary: dict[str, Any]) -> str:
        return ", ".join([f"{summary['step']} steps", *self._scores(summary)])

    def result_of(self, summary: dict[str, Any]) -> str:
        return f"{', '.join(self._scores(summary)) or 'trained'} after {summary['step']} steps"

    def write_export(self, directory: Path) -> None:
        """The export the run wrote (summary.json's "export": a directory, or several, each then by its name), where
        EXPORT_DIR asks for one. Only a directory inside OUTPUT_DIR (where a run exports when EXPORT_DIR was unset):
        summary.json is a file on the volume, and what it names goes to the export's bucket."""
        exported = (self.summary() or {}) if self.config.export_dir is not None else {}
        written = exported.get("export")
        inside = self.output_dir().resolve()
        sources = [Path(path) for path in ([written] if isinstance(written, str) else
                                           written if isinstance(written, list) else [])
                   if isinstance(path, str) and Path(path).is_dir() and not Path(path).is_symlink()
                   and Path(path).resolve().is_relative_to(inside)]
        for source in sources:
            shutil.copytree(source, directory / source.name if len(sources) > 1 else directory, symlinks=True,
                            dirs_exist_ok=True)

    @staticmethod
    def _scores(summary: dict[str, Any]) -> list[str]:
        return [f"{name} {summary[name]:.4f}" for name in SCORES
                if isinstance(summary.get(name), (int, float)) and not isinstance(summary.get(name), bool)]
