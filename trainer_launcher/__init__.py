"""The pod's PID 1: torchrun, exiting with the root cause's code (launch.py), with the checks before the
rendezvous and the export's upload; what it may know of a program's run on the volume is what the program
registers (programs.py)."""
