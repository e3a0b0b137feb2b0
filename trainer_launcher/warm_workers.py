"""The pod's warm-worker server: a process that has imported torch and the program, and forks the worker process of
each later round (trainer_contract/warm_start.py: the protocol, and the stand-in torchrun starts and watches).

    python -m trainer_launcher.warm_workers NAME MODULE --after PROGRESS --parent PID --since TIME --delay SECONDS \\
        [--import MODULE ...]

A worker started cold spends most of a round's restart importing torch, the program and torch._dynamo (which
torch.optim imports on the first step): 3.5 of the 3.8 s a killed worker cost on 2 cores (python -m bench.recovery).
Forked from here it starts with them imported. The launcher starts the server with its first round; the server
imports nothing until the gang has published a checkpoint since then (PROGRESS) and trained values
warm_workers_after_seconds more: a run that fails before its first checkpoint has nothing to resume, a short run
never pays for the imports, and a replacement pod's server does not compete with its own pod's start. Then it
listens on NAME (abstract namespace; only its own uid is served). It ends with the launcher, and its workers with
their stand-ins.

Each worker is forked before any thread or device of its own exists: torch is imported but not initialised (no
CUDA context, no thread pool, no process group), as in a DataLoader worker started by fork.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from trainer_contract.gang_rounds import PROGRESS_VARIABLE
from trainer_contract.start_up import die_with_parent, import_all
from trainer_contract.warm_start import (
    LAUNCHER_PID_VARIABLE,
    MAX_REQUEST_BYTES,
    SOCKET_VARIABLE,
    address,
    warm_after_seconds,
)

POLL_SECONDS = 0.2
REQUEST_SECONDS = 5.0  # to read a stand-in's request: one that sends less in that time is refused
TORCH_IMPORTS = ("torch", "torch.distributed", "torch._dynamo")


class WarmWorkers:
    """The launcher's side: this pod's server for ``-m module``, started with the first round (it warms up
    warm_workers_after_seconds after the gang's next checkpoint) and stopped with the launcher; its socket named in
    the environment torchrun's workers inherit. Nothing for a program of the user's (``imports`` None) or where warm workers are off (values
    warm_workers_after_seconds null)."""

    def __init__(self, module: str | None, imports: tuple[str, ...] | None, environ=os.environ):
        self.module, self.imports, self.environ = module, imports, environ
        self.server: subprocess.Popen | None = None

    def start(self) -> None:
        progress, delay = self.environ.get(PROGRESS_VARIABLE), warm_after_seconds(self.environ)
        if self.server is not None or self.module is None or self.imports is None or not progress or delay is None:
            return
        name = f"indexed-trainer-warm-{os.getpid()}-{secrets.token_hex(8)}"
        command = [sys.executable, "-u", "-m", "trainer_launcher.warm_workers", name, self.module, "--after",
                   progress, f"--parent={os.getpid()}", f"--since={time.time():.6f}",
                   f"--delay={delay:g}", *(f"--import={item}" for item in (*TORCH_IMPORTS, *self.imports))]
        self.server = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        self.environ[SOCKET_VARIABLE] = name

    def pids(self) -> frozenset[int]:
        """The server's process, a child of the launcher that is no worker of a round."""
        return frozenset() if self.server is None else frozenset({self.server.pid})

    def __enter__(self) -> WarmWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.environ.pop(SOCKET_VARIABLE, None)
        if self.server is not None and self.server.poll() is None:
            self.server.kill()
            self.server.wait()


def tell(message: str) -> None:
    print(f"launcher: {message}", file=sys.stderr, flush=True)


class Request:
    """A stand-in's request, checked: nothing in it is trusted beyond what a worker of this pod may be given."""

    def __init__(self, payload: bytes, module: str):
        try:
            value = json.loads(payload)
        except (ValueError, RecursionError) as error:  # RecursionError: nesting deeper than the parser's stack
            raise ValueError(f"not JSON: {type(error).__name__}") from None
        if not isinstance(value, dict) or value.get("module") != module:
            raise ValueError(f"not a request for -m {module}")
        argv, env, cwd, launcher = value.get("argv"), value.get("env"), value.get("cwd"), value.get("launcher")
        if not (isinstance(argv, list) and all(isinstance(item, str) for item in argv)):
            raise ValueError("argv is not a list of strings")
        if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise ValueError("env is not a mapping of strings")
        if not isinstance(cwd, str) or not isinstance(launcher, int):
            raise ValueError("cwd or launcher missing")
        self.argv, self.env, self.cwd, self.launcher = argv, env, cwd, launcher


def receive(connection: socket.socket, module: str) -> tuple[Request, list[int]]:
    """The request and the stand-in's three standard streams; ValueError (its descriptors closed) if malformed."""
    payload, fds, _, _ = socket.recv_fds(connection, 65536, 3)
    try:
        while not payload.endswith(b"\n"):
            if len(payload) > MAX_REQUEST_BYTES:
                raise ValueError(f"larger than {MAX_REQUEST_BYTES} bytes")
            more = connection.recv(65536)
            if not more:
                raise ValueError("cut short")
            payload += more
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} descriptors instead of the 3 standard streams")
        return Request(payload, module), fds
    except (ValueError, OSError):
        for fd in fds:
            os.close(fd)
        raise


def same_user(connection: socket.socket) -> bool:
    """Whether the peer runs as this process's uid (SO_PEERCRED): an abstract socket has no file permissions."""
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", credentials)
    return uid == os.getuid()


def become_worker(request: Request, fds: list[int], connection: socket.socket, module: str) -> None:
    """In the forked child: take the stand-in's streams, environment, directory and arguments, run ``module`` as
    ``python -m`` would, and exit with its code; die when the stand-in does. Never returns."""
    code = 1
    try:
        os.setsid()  # its own session, as torchrun starts workers: a signal to the launcher's group is not doubled
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request.env)
        os.environ[LAUNCHER_PID_VARIABLE] = str(request.launcher)
        os.chdir(request.cwd)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        threading.Thread(target=die_with_stand_in, args=(connection,), daemon=True).start()
        sys.argv = list(request.argv)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as leaving:
        code = leaving.code if isinstance(leaving.code, int) else (0 if leaving.code is None else 1)
        if not isinstance(leaving.code, (int, type(None))):
            print(leaving.code, file=sys.stderr)
    except BaseException:  # as the interpreter would: the traceback on stderr, exit 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def die_with_stand_in(connection: socket.socket) -> None:
    """The stand-in sends nothing after its request: end of stream means it is gone (torchrun's SIGKILL, a kill of
    the worker by its pid) and the worker must not outlive it."""
    connection.settimeout(None)  # the server's timeout for reading the request is not the worker's lifetime
    try:
        while connection.recv(4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


class Server:
    def __init__(self, listener: socket.socket, module: str, parent: int):
        self.listener, self.module, self.parent = listener, module, parent
        self.workers: dict[int, socket.socket] = {}  # pid -> its stand-in's connection

    def serve(self) -> None:
        """Until the launcher is gone: fork a worker for each request, report each worker's end."""
        while os.getppid() == self.parent:
            ready, _, _ = select.select([self.listener], [], [], POLL_SECONDS)
            if ready:
                self.accept()
            self.reap()
        for pid in self.workers:
            _kill(pid)

    def accept(self) -> None:
        connection, _ = self.listener.accept()
        try:
            connection.settimeout(REQUEST_SECONDS)
            if not same_user(connection):
                connection.close()
                return
            request, fds = receive(connection, self.module)
        except (ValueError, OSError) as error:
            tell(f"warm workers: a request refused: {error}")
            connection.close()
            return
        try:
            pid = os.fork()
        except OSError as error:  # no memory, no process left: this stand-in runs its worker cold
            tell(f"warm workers: cannot fork a worker ({error}); it starts cold")
            for fd in fds:
                os.close(fd)
            connection.close()
            return
        if pid == 0:
            self.listener.close()
            for other in self.workers.values():
                other.close()
            become_worker(request, fds, connection, self.module)
        for fd in fds:
            os.close(fd)
        rank = request.env.get("RANK", "?")
        try:
            connection.sendall(f"pid {pid}\n".encode())
        except OSError:
            _kill(pid)
        self.workers[pid] = connection
        tell(f"worker rank {rank} started warm (pid {pid}, forked with torch imported)")

    def reap(self) -> None:
        for pid in list(self.workers):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
            connection = self.workers.pop(pid)
            ending = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                      else f"exit {os.WEXITSTATUS(status)}")
            try:
                connection.sendall(f"{ending}\n".encode())
            except OSError:
                pass
            connection.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for(path: Path, parent: int, started: float, delay: float) -> bool:
    """Wait, importing nothing, until a checkpoint noted at ``path`` since ``started`` is ``delay`` seconds old (a
    replacement pod's server does not compete with its own pod's start); False if the launcher ended first."""
    ready_at = None
    while ready_at is None or time.monotonic() < ready_at:
        if os.getppid() != parent:
            return False
        if ready_at is None and _noted_since(path, started):
            ready_at = time.monotonic() + delay
        time.sleep(min(1.0, delay) if ready_at is not None else 1.0)
    return True


def _noted_since(path: Path, started: float) -> bool:
    try:
        return path.stat().st_mtime >= started
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer_launcher.warm_workers")
    parser.add_argument("name")
    parser.add_argument("module")
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--parent", type=int, required=True)  # the launcher, which may be gone already
    parser.add_argument("--since", type=float, default=0.0)  # when the launcher started it (a Unix time)
    parser.add_argument("--delay", type=float, default=0.0)  # seconds to wait after ``--after`` exists
    parser.add_argument("--import", dest="imports", action="append", default=[])
    args = parser.parse_args(argv)
    parent = args.parent
    die_with_parent()  # the serve loop's check of the parent covers a kernel without it
    if os.getppid() != parent:
        return 0
    for signum in (signal.SIGINT, signal.SIGTERM):  # it ends with the launcher (a Ctrl-C reaches the whole group)
        signal.signal(signum, signal.SIG_IGN)
    if not wait_for(args.after, parent, args.since, args.delay):
        return 0
    began = time.perf_counter()
    # torch.cuda.is_available() asks NVML instead of initialising CUDA, which a forked worker could not use again
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    import_all(args.imports)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        tell("warm workers off: importing the program initialised CUDA, which a forked worker cannot use; later "
             "rounds' workers start cold")
        return 0
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address(args.name))
    listener.listen(64)
    tell(f"warm workers ready for -m {args.module}: later rounds' workers start with torch and the program "
         f"imported ({time.perf_counter() - began:.1f} s to import them)")
    Server(listener, args.module, parent).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
