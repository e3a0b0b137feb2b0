"""The built-in programs, each a thin program on the training runtime (trainer_runtime), and the names the
manifests run them by:

    python -m worker            the MNIST smoke test (worker/mnist/)
    python -m worker.qa         SQuAD question answering with Lightning FSDP or DDP (worker/qa/)
    python -m worker.finetune   text classification of a Hub model with plain PyTorch DDP + AMP (worker/finetune/)
    python -m worker.sft        supervised fine-tuning of a causal LM with LoRA (worker/sft/)
    python -m worker.launch     the pod's launcher (trainer_launcher), knowing the MNIST worker's run
    python -m worker.staging    the init container's stager (trainer_stager)

Importing this package is cheap; torch is imported only by the modules that train.
"""
