"""Benchmarks: the worker against the standard DDP loop and against this machine's limits, side by side.

    python -m bench                       # the full table (several minutes), also written as JSON
    python -m bench --quick               # a few steps of everything: checks the benchmark runs
"""
