"""Extractive question answering (seed 002: BERT on SQuAD): the SQuAD metrics now; the data, the Lightning
trainer and the export come with issue 30."""
