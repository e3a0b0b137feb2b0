"""What the built-in programs that fine-tune a pretrained model (worker.qa with Lightning; worker.finetune and
worker.sft in plain PyTorch; their settings compose trainer_contract.program_settings.PretrainedModelSettings)
share: the training loop of finetune and sft (loop), a pretrained model directory and its revision and
the settings a resume must keep (checkpoint_record), checkpoint files named by step, the run's lines and
TensorBoard scalars (run_log; metrics.jsonl through trainer_runtime.metrics_file), the refusals, the exit codes
and the usage log around a run (run), resumable batches, and the atomic save_pretrained export (export)."""
