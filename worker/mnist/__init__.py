"""The MNIST worker (python -m worker): the CNN, its data (downloaded once onto the shared volume, or the digits
shipped in mnist-sample/), the training loop on the runtime, its finished-run record and export."""
