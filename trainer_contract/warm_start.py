"""Warm workers: the worker process of a later round starts from a process of its pod that has imported torch and
the program already (trainer_launcher/warm_workers.py, the server), instead of importing them again.

torchrun still starts and watches each worker process as always (``python -u -m worker ...``); that process, the
*stand-in*, asks the pod's server (a Unix socket named in SOCKET_VARIABLE) to fork the worker with the stand-in's
arguments, environment, working directory and standard streams, forwards the signals torchrun sends it, and
exits as the worker exited (a signal death by the same signal), so torchrun, the launcher and the Job see what
they would see of a worker started cold. When the stand-in dies (SIGKILL), the worker dies with it. Without a
server, or when it does not answer, the stand-in runs the worker itself: a warm start is an optimisation only.

The protocol, one connection per worker: the stand-in sends its three standard streams (SCM_RIGHTS) and one JSON
request line; the server answers ``pid <worker>`` once forked, then ``exit <code>`` or ``signal <number>``.

Torch-free: the stand-in must not import what it delegates.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

SOCKET_VARIABLE = "INDEXED_TRAINER_WARM_SOCKET"  # the server's socket (abstract namespace), set by the launcher
# values warm_workers_after_seconds: seconds of training after the gang's first checkpoint since the server started
# before it imports anything (it pays off on long runs, where a fault is likely; a run that ends sooner never pays
# for it), or "off"
WARM_AFTER_VARIABLE = "INDEXED_TRAINER_WARM_AFTER_SECONDS"
WARM_AFTER_SECONDS = 30.0  # where the variable is unset (a launcher under a render that predates it)
OFF = "off"
LAUNCHER_PID_VARIABLE = "INDEXED_TRAINER_LAUNCHER_PID"  # in a warm worker: the stand-in's parent (torchrun)
# The signals torchrun (and a user) may send a worker: what the stand-in passes on.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
MAX_REQUEST_BYTES = 4 << 20  # argv and the environment; a request larger than this is refused
CONNECT_SECONDS = 2.0
REPLY_SECONDS = 10.0  # the server forks at once; longer means it is stuck


def warm_after_seconds(environ=os.environ) -> float | None:
    """WARM_AFTER_VARIABLE's seconds; None when warm workers are off; WARM_AFTER_SECONDS when unset or malformed."""
    text = environ.get(WARM_AFTER_VARIABLE, "").strip()
    if text.lower() == OFF:
        return None
    try:
        value = float(text)
    except ValueError:
        return WARM_AFTER_SECONDS
    return value if 0 <= value < 1e9 else WARM_AFTER_SECONDS


def launcher_pid() -> int:
    """The process that started this worker: torchrun's agent, also when a warm server forked it."""
    text = os.environ.get(LAUNCHER_PID_VARIABLE, "")
    return int(text) if text.isdigit() else os.getppid()


def address(name: str) -> str:
    """The socket's address: Linux's abstract namespace (no file to leave behind or to fit in 108 bytes); the
    server accepts only its own uid (SO_PEERCRED)."""
    return "\0" + name


def run_warm(module: str) -> int | None:
    """In a worker process torchrun started: have the pod's server fork the worker ``module`` and stand in for
    it; its exit code (a signal death is re-raised here, never returned). None when no server takes the request
    (none configured, not ready, gone): the caller runs the worker itself."""
    name = os.environ.get(SOCKET_VARIABLE)
    if not name or "RANK" not in os.environ:
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # a signal waits until there is a worker to pass it to (or, cold, until the worker's own handlers)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        connection.settimeout(CONNECT_SECONDS)
        connection.connect(address(name))
        request = {"module": module, "argv": sys.argv, "cwd": os.getcwd(),
                   "env": {key: value for key, value in os.environ.items() if key != SOCKET_VARIABLE},
                   "launcher": os.getppid()}
        socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        connection.settimeout(REPLY_SECONDS)
        reader = connection.makefile("rb")
        first = reader.readline(64).decode("ascii", "replace").split()
    except OSError:
        first = []
    if len(first) != 2 or first[0] != "pid" or not first[1].isdigit():
        connection.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return None
    return _stand_in(int(first[1]), reader, connection, blocked)


def _stand_in(pid: int, reader, connection: socket.socket, blocked) -> int:
    """Pass signals to worker ``pid`` until the server says how it ended; end as it did."""
    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    connection.settimeout(None)
    try:
        ending = reader.readline(256).decode("ascii", "replace").split()
    except OSError:
        ending = []
    if len(ending) == 2 and ending[0] == "exit" and ending[1].lstrip("-").isdigit():
        return int(ending[1])
    if len(ending) == 2 and ending[0] == "signal" and ending[1].isdigit():
        _die_by(int(ending[1]))
    # the server is gone while the worker runs: nobody could report its end, so it must not outlive this process
    print(f"Rank {os.environ.get('RANK', '?')}: error: the pod's warm-worker process ended while worker pid {pid} "
          "ran; stopping it", file=sys.stderr, flush=True)
    forward(signal.SIGKILL, None)
    _die_by(signal.SIGKILL)
    raise AssertionError("unreachable")


def _die_by(signum: int) -> None:
    """End this process by ``signum``, as the worker did (torchrun then reports the same signal)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if signum != signal.SIGKILL:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default is to continue (cannot be one torchrun reports)
