"""Extractive question answering (BERT on SQuAD) with Lightning, under FSDP or DDP: the SQuAD reader (squad.py),
the features and their batches (features.py, batches.py), the LightningModule (module.py), checkpoints through
Lightning's hooks (checkpoints.py), the SQuAD metrics (metrics.py), the run (train.py) and the export (export.py)."""
