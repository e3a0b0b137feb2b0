"""A pretrained Hub model fine-tuned for text classification with plain PyTorch DDP and AMP
(``python -m worker.finetune``)."""
