"""Shared test helpers: paths, the package under test, and running the installed console scripts.

The suite tests what users install: CI installs the wheel (not the checkout, not editable) and pytest runs
with --import-mode=append from .venv/bin/pytest, so the checkout's generator/, worker/ and localjob/ are
never importable ahead of the installed ones, and a module missing from the wheel fails. Programs start in
OUTSIDE, a directory that is not the checkout (``python -m`` puts the current directory first on the path).
"""

from __future__ import annotations

import ast
import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# Run as root (CI is), local-job starts the pods as their securityContext's uid 10001, which cannot reach a Python
# under root's home: the suite lets it run them as root instead, as `local-job --allow-root` does and says.
# tests/localjob/test_pod_identity.py tests the refusal and the switch to the pods' user themselves. A test that
# builds a shell's environment from nothing adds ROOT_ALLOWANCE to it.
ROOT_ALLOWANCE = {"LOCAL_JOB_ALLOW_ROOT": "1"} if os.geteuid() == 0 else {}
os.environ.update(ROOT_ALLOWANCE)


def _product_packages() -> tuple[str, ...]:
    """The packages setup.py ships (its PRODUCT), read without running it: one list for the wheel and the tests."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    node = next(node for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and any(getattr(target, "id", None) == "PRODUCT" for target in node.targets))
    return tuple(ast.literal_eval(node.value))


PRODUCT_PACKAGES = _product_packages()
# An empty working directory for the programs the tests start: nothing in it shadows the installed package.
OUTSIDE = Path(tempfile.mkdtemp(prefix="indexed-trainer-tests-"))
atexit.register(shutil.rmtree, OUTSIDE, ignore_errors=True)


def package_dirs() -> dict[str, Path]:
    """Where each product package is imported from in this environment."""
    return {name: Path(importlib.util.find_spec(name).origin).parent for name in PRODUCT_PACKAGES}


def tests_the_checkout() -> bool:
    """True when a product package is imported from the checkout's own source folder (an editable install,
    or the checkout on sys.path); a virtual environment inside the checkout (.venv) does not count."""
    return any(path.resolve() == (ROOT / name).resolve() for name, path in package_dirs().items())


_BUSY_AT_SETUP = pytest.StashKey[float | None]()
_OWN_AT_SETUP = pytest.StashKey[float]()


def own_cpu_seconds() -> float:
    """CPU seconds of this process and of every process it waited for, and theirs in turn (torchrun's ranks,
    local-job's pods): a server started for a whole session and never waited for (slurmd, a kubelet) is left out."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def machine_busy_seconds() -> float | None:
    """CPU seconds this machine has spent busy since boot, every process's (/proc/stat; None elsewhere)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_BUSY_AT_SETUP] = machine_busy_seconds()
    item.stash[_OWN_AT_SETUP] = own_cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each test's CPU seconds from its setup to its teardown in the JUnit report beside the wall time: the
    machine's (programs under slurmd or a kubelet are no child of this process; a tier running beside adds its own)
    and its own processes' (own_cpu_seconds). A test that mostly waits shows few: that says where it belongs in
    .ci/run (onecore: beside the training tier)."""
    began = item.stash.get(_BUSY_AT_SETUP, None)
    now = machine_busy_seconds() if call.when == "teardown" else None
    if began is not None and now is not None:
        item.user_properties.append(("machine_cpu_s", f"{now - began:.1f}"))
    if call.when == "teardown" and _OWN_AT_SETUP in item.stash:
        item.user_properties.append(("own_cpu_s", f"{own_cpu_seconds() - item.stash[_OWN_AT_SETUP]:.1f}"))
    yield


def pytest_report_header(config):
    where = "the checkout (editable install or source path)" if tests_the_checkout() else "the installed package"
    return f"indexed-trainer under test: {where}: {package_dirs()['worker'].parent}"


def pytest_sessionstart(session):
    # CI tests the installed wheel; an editable install is for a developer's own runs only.
    if os.environ.get("CI") == "true" and tests_the_checkout():
        raise pytest.UsageError(
            f"CI must test the installed package, but worker comes from {package_dirs()['worker']}: install the "
            f"wheel (not -e) and run .venv/bin/pytest (not python -m pytest, which puts the checkout on the path)")


def run_tool(name: str, *args: str, input: bytes | None = None, env: dict | None = None, timeout: float = 120,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run an installed console script (gen-manifests, local-job), outside the checkout by default."""
    return subprocess.run(
        [str(BIN / name), *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd or OUTSIDE,
    )


@pytest.fixture
def gen():
    def _gen(*args: str, **kwargs) -> subprocess.CompletedProcess:
        return run_tool("gen-manifests", *args, **kwargs)

    return _gen


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """The wheel users install, built from this checkout by pip (isolated build, as `pip wheel .` does)."""
    wheels = tmp_path_factory.mktemp("wheels")
    # what a module deleted since an earlier build leaves in setuptools' build folder: it must not ship
    # (tests/generator/test_install.py compares the wheel with the tree)
    stale = ROOT / ".setuptools-build" / "lib" / "worker" / "deleted_since_the_last_build.py"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("raise ImportError('a module deleted from the tree')\n")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                            capture_output=True, text=True, timeout=600, cwd=OUTSIDE)
    assert result.returncode == 0, result.stderr[-2000:]
    return next(wheels.glob("indexed_trainer-*.whl"))


def node_environment(directory: Path, wheel: Path) -> Path:
    """A virtual environment as a site would make for its nodes: indexed-trainer installed from the wheel; its
    heavy dependencies (torch, ...) shared from this test environment through a .pth file, not copied."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120)
    python = directory / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    shared = [path for path in sys.path if path.endswith("site-packages") and Path(path).is_dir()]
    Path(site, "test-environment.pth").write_text("".join(f"{path}\n" for path in shared))
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                             str(wheel)], capture_output=True, text=True, timeout=300, cwd=OUTSIDE)
    assert result.returncode == 0, result.stderr[-2000:]
    # torch's console script, as installing torch into the venv writes it (a plain-torchrun job execs it)
    torchrun = directory / "bin" / "torchrun"
    torchrun.write_text(f"#!{python}\nimport sys\nfrom torch.distributed.run import main\n\nsys.exit(main())\n")
    torchrun.chmod(0o755)
    # torchft's Lighthouse likewise (the Slurm script of replica groups starts it), where torchft is installed
    lighthouse = directory / "bin" / "torchft_lighthouse"
    lighthouse.write_text(f"#!{python}\nimport sys\nfrom torchft._torchft import lighthouse_main\n\n"
                          "sys.exit(lighthouse_main())\n")
    lighthouse.chmod(0o755)
    return directory


@pytest.fixture(scope="module")
def checkpoint_s3():
    """moto's S3 reached from this process (the runs it starts inherit its environment), with the bucket
    ``team-ckpt`` that the checkpoint-bucket tests mirror to."""
    pytest.importorskip("moto")
    from testbed.storage_servers import s3_in_this_process

    with s3_in_this_process() as server:
        server.client().create_bucket(Bucket="team-ckpt")
        yield server


# The MNIST data the training runs read (tests/mnist/, tests/runtime/, tests/launcher/), made once per session.
@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory):
    """The real digits the worker ships (first 8,000 train / last 2,000 test)."""
    from testbed.mnist_data import dataset_files, write_raw

    directory = tmp_path_factory.mktemp("digits")
    write_raw(directory, dataset_files())
    return directory


@pytest.fixture(scope="session")
def small_dir(tmp_path_factory):
    """A small synthetic set for runs whose accuracy does not matter."""
    from testbed.mnist_data import raw_files, synthetic_digits, write_raw

    directory = tmp_path_factory.mktemp("small")
    write_raw(directory, raw_files(synthetic_digits(1024, seed=3), synthetic_digits(256, seed=4)))
    return directory


@pytest.fixture(scope="session")
def default_run(digits_dir, tmp_path_factory):
    """The default settings (allreduce, 5 epochs, batch 64 per process) under torchrun with 2 processes, on
    the digits: run once, read by every test about it (the training log, files, accuracy, strategies)."""
    from tests.mnist.launch import run, torchrun_command, worker_env

    out = tmp_path_factory.mktemp("default-run")
    result = run(torchrun_command(2), worker_env(digits_dir, out), timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result.stdout
