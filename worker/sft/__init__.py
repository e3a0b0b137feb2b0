"""Supervised fine-tuning of a causal language model (issue 39): examples.py reads and tokenizes the data."""
