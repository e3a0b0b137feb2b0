"""Extractive question answering (seed 002: BERT on SQuAD). So far the SQuAD metrics (metrics.py) and the SQuAD
JSON reader (squad.py); the tokenisation, the Lightning trainer and the export come with the rest of issue 30."""
