"""The ground floor every room stands on, torch-free and in the generator-only install: what the generator,
local-job and the worker must agree on, stated once.

    exit_codes  each exit code with its meaning and the action it takes (retry, free, fail, stop)
    names       the names a Job's objects and pods derive from its name, and their limits
    variables   the built-in worker's variables (type, default, range or choices, help) and the reserved ones
    launcher    the container commands and the torchrun command line, once for every target
    storage     the storage URIs (hf://, s3://, https://, paths), where each source is staged, the markers
    atomic      the one way to write a file another process reads; hooks, the seam tests step in by
    progress    how a duration is written for a person

Nothing here imports generator, localjob, worker or torch (import-linter's contracts in setup.cfg say so).
"""
