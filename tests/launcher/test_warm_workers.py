"""Warm workers (trainer_launcher/warm_workers.py, trainer_contract/warm_start.py) against a real server: a stand-in
started as torchrun starts a worker (its own session, its own streams) ends as the forked worker did, passes signals
on, and takes the worker with it when it dies; without a server it runs cold."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer_contract.gang_rounds import PROGRESS_VARIABLE
from trainer_contract.warm_start import (
    SOCKET_VARIABLE,
    WARM_AFTER_SECONDS,
    WARM_AFTER_VARIABLE,
    address,
    warm_after_seconds,
)
from trainer_launcher.warm_workers import REQUEST_SECONDS, Request, WarmWorkers

# The program: its entry stands in when a server takes it, as trainer_runtime/entry.start does; ACTION says what the
# worker does: exit=N, signal=N, sleep (until signalled: SIGTERM exits 143 after a line), pid (print it, sleep).
PROBE = textwrap.dedent("""
    import os, signal, sys, time
    from trainer_contract.warm_start import run_warm, LAUNCHER_PID_VARIABLE

    code = run_warm("probe")
    if code is not None:
        sys.exit(code)
    action, _, value = os.environ["ACTION"].partition("=")
    print(f"worker pid {os.getpid()} warm={'torch' in sys.modules} argv={sys.argv[1:]} cwd={os.getcwd()} "
          f"launcher={os.environ.get(LAUNCHER_PID_VARIABLE)}", flush=True)
    if action == "exit":
        sys.exit(int(value))
    if action == "signal":
        os.kill(os.getpid(), int(value))
    def stopped(signum, frame):
        print(f"worker got {signal.Signals(signum).name}", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, stopped)
    time.sleep(60)
""")

@pytest.fixture
def program(tmp_path):
    package = tmp_path / "lib" / "probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(PROBE)
    return tmp_path / "lib"

@pytest.fixture
def server(program, tmp_path, monkeypatch):
    """A server for -m probe (torch among its imports, as the launcher's), ready; the environment a worker gets."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(program), os.environ.get("PYTHONPATH", "")]))
    progress = tmp_path / "progress"
    environ = dict(os.environ, **{PROGRESS_VARIABLE: str(progress), WARM_AFTER_VARIABLE: "0"})
    with WarmWorkers("probe", (), environ) as warm:
        warm.start()
        assert warm.server is not None
        progress.write_text("1 ckpt-1 0\n")
        _wait_listening(environ[SOCKET_VARIABLE], warm.server)
        yield environ, warm.server
    assert warm.server.wait(5) is not None

def _wait_listening(name: str, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server ended"
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(address(name))
            return
        except OSError:
            time.sleep(0.1)
        finally:
            probe.close()
    raise AssertionError("the server never listened")

def stand_in(environ: dict, action: str, tmp_path: Path, *argv: str) -> subprocess.Popen:
    """A worker process as torchrun starts it: `python -u -m probe ARGS` in its own session, with RANK."""
    return subprocess.Popen([sys.executable, "-u", "-m", "probe", *argv], env=dict(environ, ACTION=action, RANK="1"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)

@pytest.mark.parametrize("code", [0, 3, 75])
def test_the_stand_in_ends_with_the_warm_workers_code_and_streams(server, tmp_path, code):
    environ, process = server
    worker = stand_in(environ, f"exit={code}", tmp_path, "--flag", "a b")
    output, _ = worker.communicate(timeout=60)
    assert worker.returncode == code, output
    assert "warm=True" in output, output  # forked from the server, which had imported torch
    assert "argv=['--flag', 'a b']" in output and f"cwd={tmp_path}" in output, output
    assert f"launcher={os.getpid()}" in output, output  # torchrun's pid (here: the test's) for the fault injector

def test_a_signal_death_is_the_stand_ins_own(server, tmp_path):
    environ, _ = server
    worker = stand_in(environ, f"signal={int(signal.SIGSEGV)}", tmp_path)
    output, _ = worker.communicate(timeout=60)
    assert worker.returncode == -signal.SIGSEGV, output
    assert "warm=True" in output, output

def test_sigterm_to_the_stand_in_reaches_the_worker(server, tmp_path):
    """...however long the worker has run (the server's timeout for reading a request once killed it after 5 s)."""
    environ, _ = server
    worker = stand_in(environ, "sleep", tmp_path)
    assert "warm=True" in worker.stdout.readline()
    time.sleep(REQUEST_SECONDS + 1)
    assert worker.poll() is None
    os.killpg(worker.pid, signal.SIGTERM)  # as torchrun stops a worker
    output, _ = worker.communicate(timeout=60)
    assert "worker got SIGTERM" in output and worker.returncode == 143, output

def test_the_worker_dies_with_its_stand_in(server, tmp_path):
    environ, _ = server
    worker = stand_in(environ, "sleep", tmp_path)
    line = worker.stdout.readline()
    pid = int(line.split()[2])
    assert pid != worker.pid and "warm=True" in line, line
    worker.kill()
    worker.wait(10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]

def test_without_a_server_the_worker_runs_cold(program, tmp_path):
    environ = dict(os.environ, PYTHONPATH=str(program), **{SOCKET_VARIABLE: "indexed-trainer-warm-nobody-listens"})
    worker = stand_in(environ, "exit=4", tmp_path)
    output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 4 and "warm=False" in output and f"pid {worker.pid} " in output, output

def test_turned_off_there_is_no_server(tmp_path):
    environ = {PROGRESS_VARIABLE: str(tmp_path / "progress"), WARM_AFTER_VARIABLE: "off"}
    with WarmWorkers("probe", (), environ) as warm:
        warm.start()
        assert warm.server is None and SOCKET_VARIABLE not in environ
    with WarmWorkers("a-program-of-its-own", None, dict(environ, **{WARM_AFTER_VARIABLE: "0"})) as warm:
        warm.start()
        assert warm.server is None


def test_a_request_for_another_program_is_refused(server, tmp_path):
    environ, _ = server
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(address(environ[SOCKET_VARIABLE]))
    request = b'{"module": "os", "argv": [], "env": {}, "cwd": "/", "launcher": 1}\n'
    socket.send_fds(connection, [request], [0, 1, 2])
    connection.settimeout(10)
    assert connection.recv(64) == b""  # closed without a pid: nothing forked
    worker = stand_in(environ, "exit=0", tmp_path)  # and the server still serves
    assert worker.wait(60) == 0

def test_the_server_ends_with_its_launcher(program, tmp_path):
    """A launcher killed whole (SIGKILL) leaves no server behind: it polls for its parent."""
    progress = tmp_path / "progress"
    progress.write_text("1 ckpt-1 0\n")
    launcher = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        from trainer_launcher.warm_workers import REQUEST_SECONDS, Request, WarmWorkers
        warm = WarmWorkers("probe", (), dict(os.environ, {PROGRESS_VARIABLE}={str(progress)!r},
                                             {WARM_AFTER_VARIABLE}="0"))
        warm.start()
        print(warm.server.pid, flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(program)))
    pid = int(launcher.stdout.readline())
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the server outlived its launcher"
        time.sleep(0.1)


@pytest.mark.parametrize(("text", "seconds"), [(None, WARM_AFTER_SECONDS), ("0", 0.0), ("12.5", 12.5), (" 30 ", 30.0),
                                               ("off", None), (" OFF ", None), ("-1", WARM_AFTER_SECONDS),
                                               ("soon", WARM_AFTER_SECONDS), ("nan", WARM_AFTER_SECONDS),
                                               ("inf", WARM_AFTER_SECONDS)])
def test_the_delay_before_warming(text, seconds):
    assert warm_after_seconds({} if text is None else {WARM_AFTER_VARIABLE: text}) == seconds


REQUEST_FIELDS = st.fixed_dictionaries({}, optional={
    "module": st.sampled_from(["probe", "worker", ""]) | st.integers(),
    "argv": st.lists(st.text(max_size=5), max_size=3) | st.text(max_size=5) | st.lists(st.integers(), max_size=2),
    "env": st.dictionaries(st.text(max_size=5), st.text(max_size=5) | st.integers(), max_size=3),
    "cwd": st.text(max_size=5) | st.none(),
    "launcher": st.integers() | st.text(max_size=3)})


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), REQUEST_FIELDS.map(lambda value: json.dumps(value).encode()),
                 st.integers(1, 100_000).map(lambda depth: b"[" * depth + b"]" * depth)))
def test_a_request_parses_whole_or_is_refused_with_a_reason(payload):
    """Whatever a peer sends, the server gets a checked request or a ValueError, never another error (which would
    end the server) and never a request with fields of the wrong type."""
    try:
        request = Request(payload, "probe")
    except ValueError:
        return
    assert all(isinstance(item, str) for item in request.argv)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in request.env.items())
    assert isinstance(request.cwd, str) and isinstance(request.launcher, int)
