"""Run by every Python process started with this folder on PYTHONPATH (tests/mnist/launch.py's fault_env
puts it there for the processes a test injects faults into): with FAULT_INJECT set, the fault injector is
installed as the worker's hook (trainer_contract/hooks.py). Nothing of it is in the package users install."""

import os

if os.environ.get("FAULT_INJECT"):
    from fault_injector import install_from_environ

    install_from_environ()
