"""scripts/install.sh, the one installer of .ci/run, prepare.sh/run.sh, the Dockerfile and the Slurm nodes."""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from testbed.http_mirror import Mirror
from tests.conftest import OUTSIDE, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.onecore]


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    return venv / "bin" / "python"


def install(python, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "scripts" / "install.sh"), str(python), *args], capture_output=True,
                          text=True, timeout=900, cwd=OUTSIDE, env={"PATH": "/usr/bin:/bin", **env})


# a pin's environment marker (after ";") is not part of its version
PINS = dict(line.split(";")[0].strip().split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line and not line.startswith("#"))
UNITS = {"kB": 10**3, "MB": 10**6, "GB": 10**9}


def announced(stderr: str) -> str:
    """install.sh's one line on the PyTorch it is about to install."""
    lines = [line for line in stderr.splitlines() if line.startswith("install.sh: installing PyTorch ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def amount(line: str, words: str) -> tuple[float, int]:
    """'63.4 MB to download' in line, as (63.4e6, the bytes one printed digit stands for)."""
    match = re.search(rf"(\d+(?:\.(\d))?) (kB|MB|GB) {words}", line)
    assert match, f"no '<size> {words}' in: {line}"
    step = UNITS[match[3]] // (10 if match[2] else 1)
    return float(match[1]) * UNITS[match[3]], step


def assert_size(line: str, words: str, expected: int) -> None:
    said, step = amount(line, words)
    assert abs(said - expected) <= step / 2, f"{line}: expected {expected} bytes {words}"


@pytest.fixture(scope="module")
def registry_run(fresh_venv, built_wheel):
    # An index that does not answer: the registry's build (install.sh --dry-run: pip installs nothing).
    return install(fresh_venv, "--dry-run", f"{built_wheel}[worker]", TORCH_INDEX_URL="http://127.0.0.1:9/simple")


def test_the_worker_resolves_to_the_pinned_torch_and_says_where_it_comes_from(registry_run):
    # An index that does not answer: the registry's build, said in one line, at the pinned version.
    result = registry_run
    assert result.returncode == 0, result.stderr[-3000:]
    pins = PINS
    assert "http://127.0.0.1:9/simple does not answer: taking PyTorch from the package registry" in result.stderr
    assert f"installing PyTorch {pins['torch']} from the package registry" in result.stderr
    would = result.stdout.split("Would install", 1)[1].split()
    assert f"torch-{pins['torch']}" in would and f"torchvision-{pins['torchvision']}" in would


def test_the_generator_alone_installs_without_torch(fresh_venv, built_wheel):
    result = install(fresh_venv, str(built_wheel))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PyTorch" not in result.stderr and "with the tested releases of" in result.stderr
    check = subprocess.run([str(fresh_venv.parent / "gen-manifests"), "--set", "replicas=3"], capture_output=True,
                           text=True, timeout=60, cwd=OUTSIDE)
    assert check.returncode == 0 and "completions: 3" in check.stdout
    assert subprocess.run([str(fresh_venv), "-c", "import torch"], capture_output=True).returncode != 0


def test_before_downloading_pytorch_it_says_which_build_and_how_large(registry_run, fresh_venv):
    # One line names the version, the build and the sizes of the files pip resolves for torch/torchvision:
    # here the registry's CUDA build, mostly from this machine's local mirrors (file://), the rest downloaded.
    line = announced(registry_run.stderr)
    assert line.startswith(f"install.sh: installing PyTorch {PINS['torch']} from the package registry: ")
    # What pip would install, asked of pip itself (its own dry run and report), measured here independently:
    # files by stat, URLs by their Content-Length.
    report = OUTSIDE / "torch-report.json"
    dry_run = subprocess.run(
        [str(fresh_venv), "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), "--constraint",
         str(ROOT / "constraints.txt"), f"torch=={PINS['torch']}", f"torchvision=={PINS['torchvision']}"],
        capture_output=True, text=True, timeout=900, cwd=OUTSIDE, env={"PATH": "/usr/bin:/bin"})
    assert dry_run.returncode == 0, dry_run.stderr[-3000:]
    entries = json.loads(report.read_text())["install"]
    local = remote = 0
    for entry in entries:
        url = entry["download_info"]["url"]
        if url.startswith("file:"):
            local += Path(unquote(urlsplit(url).path)).stat().st_size
        else:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=30) as response:
                remote += int(response.headers["Content-Length"])
    names = [entry["metadata"]["name"].lower() for entry in entries]
    gpu = [name for name in names if name.startswith(("nvidia-", "cuda-", "nvidia_", "cuda_"))]
    torch = next(entry for entry in entries if entry["metadata"]["name"] == "torch")
    cuda = bool(gpu) or "+cu" in torch["metadata"]["version"]
    assert (" CUDA build " if cuda else " CPU build") in line
    if gpu:
        assert f"(with {len(gpu)} nvidia/cuda packages)" in line
    if local:
        assert_size(line, "from local files", local)
    if remote:  # pip's cache holds what an earlier download left there: said apart, summed here
        said = sum(amount(line, words)[0] for words in ("to download", "from pip's cache") if words in line)
        step = max(amount(line, words)[1] for words in ("to download", "from pip's cache") if words in line)
        assert abs(said - remote) <= step, f"{line}: expected {remote} bytes downloaded or cached"
    else:
        assert "nothing to download" in line
    assert "unknown" not in line


def fake_wheel(folder: Path, name: str, version: str, padding: int) -> Path:
    """A small installable wheel (py3-none-any) of a module `name`, padded with incompressible bytes."""
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode()
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b"FAKE = True\n", f"{name}/padding.bin": os.urandom(padding),
             f"{info}/METADATA": metadata,
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for path, data in {**files, f"{info}/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    wheel.with_name(wheel.name + ".metadata").write_bytes(metadata)  # PEP 658: the index serves it apart
    return wheel


def test_a_torch_index_that_answers_is_measured_from_its_metadata_without_downloading(tmp_path):
    # TORCH_INDEX_URL on 127.0.0.1: a PEP 503 index of two small +cpu wheels (stand-ins, not PyTorch) with
    # their metadata files (PEP 658). The line says the CPU build and the wheels' sizes, and the dry run that
    # measured them fetched their metadata only: each wheel is downloaded once, by the install itself.
    (tmp_path / "files").mkdir()
    wheels = [fake_wheel(tmp_path / "files", "torch", f"{PINS['torch']}+cpu", 3_000_000),
              fake_wheel(tmp_path / "files", "torchvision", f"{PINS['torchvision']}+cpu", 200_000)]
    for wheel in wheels:
        project = tmp_path / "simple" / wheel.name.split("-")[0]
        project.mkdir(parents=True)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        metadata = hashlib.sha256(wheel.with_name(wheel.name + ".metadata").read_bytes()).hexdigest()
        (project / "index.html").write_text(
            f'<!DOCTYPE html><html><body><a href="../../files/{wheel.name}#sha256={digest}" '
            f'data-dist-info-metadata="sha256={metadata}" data-core-metadata="sha256={metadata}">{wheel.name}</a>'
            f"</body></html>\n")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch=={PINS['torch']}\n")
    with Mirror(tmp_path) as mirror:
        index = mirror.url + "simple"
        # only this index: no configuration file (no find-links, no extra index) of the machine running the test
        result = install(venv / "bin" / "python", "--dry-run", "--requirement", str(requirements),
                         TORCH_INDEX_URL=index, PIP_CONFIG_FILE=os.devnull)
        requests = {unquote(path): count for path, count in mirror.requests.items()}
    assert result.returncode == 0, result.stderr[-3000:]
    line = announced(result.stderr)
    assert line.startswith(f"install.sh: installing PyTorch {PINS['torch']} from {index}: CPU build, "), line
    assert_size(line, "to download", sum(wheel.stat().st_size for wheel in wheels))
    assert "local files" not in line and "nvidia" not in line
    for wheel in wheels:
        assert requests.get(f"files/{wheel.name}.metadata", 0) >= 1, requests
        assert requests.get(f"files/{wheel.name}") == 1, requests
    # and the install that followed is the one announced
    installed = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.FAKE)"],
                               capture_output=True, text=True, cwd=OUTSIDE)
    assert installed.stdout.strip() == "True", installed.stderr


def test_when_pip_cannot_resolve_pytorch_it_says_so_and_goes_on_with_the_install(fresh_venv, built_wheel):
    # The dry run is information: where it fails (here no index answers), the general words, why, and on
    # to the install itself (which fails too here, for pip's own reason).
    result = install(fresh_venv, "--dry-run", f"{built_wheel}[worker]", TORCH_INDEX_URL="",
                     PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0")
    line = announced(result.stderr)
    assert line.startswith(f"install.sh: installing PyTorch {PINS['torch']} from the package registry (on Linux "
                           f"x86_64 a CUDA build: several GB, minutes; not measured: pip install --dry-run failed"), line
    assert "with the tested releases of" in result.stderr
    assert result.returncode != 0
