"""What the built-in transformer workloads (worker.qa: Lightning, seed 002; worker.finetune: plain PyTorch, seed
004) share: a pretrained model directory and its revision (checkpoint_record), checkpoint files named by step,
the run's lines, metrics.jsonl and TensorBoard scalars (run_log), the refusals and the usage log around a run
(run), and the atomic save_pretrained export (export)."""
