"""Supervised fine-tuning of a causal language model with LoRA: the examples read, rendered with the chat template
and tokenized (examples.py), the model and its adapters (model.py), the loop (loop.py) and the run (train.py)."""
