"""What every training program stands on: how a built-in program starts (entry), the gang's environment and
process group, SIGTERM agreement (stop), precision and strategies, the one checkpoint manager (checkpoints/),
progress lines, metrics.jsonl, TensorBoard and the usage log, and what the Hugging Face workloads share
(pretrained/). It imports no workload, no launcher and no generator."""
