"""The training each pod of the Job runs under torchrun: MNIST, sharded by rank, one gradient all-reduce
per step, data downloaded once onto the shared volume, checkpoints there, resume after a failure.

Importing this package is cheap; torch is imported only by the modules that train.
"""
