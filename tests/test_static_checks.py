"""ruff and mypy over the product's packages (setup.py's PRODUCT: trainer_contract/, trainer_stager/,
trainer_launcher/, trainer_runtime/, worker/, generator/, localjob/): no finding passes CI; and import-linter's
contracts (setup.cfg [importlinter]) hold.

Their settings are in pyproject.toml; their versions are pinned in setup.cfg's test extra.
"""

import ast
import os
import re
import subprocess
from pathlib import Path

from tests.conftest import BIN, PRODUCT_PACKAGES, ROOT

PRODUCT = PRODUCT_PACKAGES


def test_mypy_checks_every_package_the_wheel_ships():
    files = re.search(r"^files = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert files is not None and sorted(ast.literal_eval(f"[{files.group(1)}]")) == sorted(PRODUCT)


def test_ruff_reports_nothing():
    result = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", *PRODUCT], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# mypy's incremental cache, kept between runs as the other tiers' state directories are: a cold check reads torch's
# types whole (about 190 s of CPU here), a warm one what changed (about 10 s). Its entries are checked against each
# file's contents, so another checkout or a new environment with the same files reuses them, and a change is seen.
MYPY_CACHE = Path(os.environ.get("MYPY_CACHE_DIR", "/var/tmp/indexed-trainer-mypy-cache"))


def test_mypy_reports_nothing():
    MYPY_CACHE.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([str(BIN / "mypy"), "--cache-dir", str(MYPY_CACHE)], capture_output=True,
                            text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_layers_hold():
    """import-linter's contracts (setup.cfg), each naming packages: the pod's rooms in layers (programs, runtime and
    launcher, stager, contract), the contract and the stager free of torch, the generator, local-job and the status
    views free of the pod's rooms and torch, the generator free of local-job and the status views, the status views
    free of both, the built-in programs apart, the runtime and seed 004 free of Lightning, and bench and testbed
    standing on the product, never on tests."""
    result = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "11 kept, 0 broken" in result.stdout, result.stdout


LONGEST_FUNCTION = 50  # lines, decorators and docstring included


def test_no_product_function_is_longer_than_a_screen():
    long = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
                    if node.end_lineno - first + 1 > LONGEST_FUNCTION:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long, f"split these (at most {LONGEST_FUNCTION} lines each): {long}"


def test_the_image_builds_every_package_the_wheel_ships():
    """The Dockerfile copies the packages one by one (a code change rebuilds only their layer): a package it
    leaves out is missing from the image's wheel, and the image cannot train."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    missing = [package for package in PRODUCT if f"COPY {package} ./{package}\n" not in dockerfile]
    assert not missing, f"the Dockerfile does not copy {missing}"
    # .dockerignore lets only what the Dockerfile copies into the build context
    allowed = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    filtered = [package for package in PRODUCT if f"!{package}/" not in allowed]
    assert not filtered, f".dockerignore keeps {filtered} out of the build context"


def test_every_torch_load_runs_no_code():
    """torch.load unpickles: each call in the repository (the product, examples, bench, testbed, tests, and the
    docs' and model cards' snippets, in strings too) passes weights_only=True, which torch < 2.6 does not default
    to."""
    calls = []
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if path.suffix not in (".py", ".md") or any(part.startswith(".") or part in ("build", "dist", "__pycache__")
                                                   for part in relative.parts):
            continue
        text = path.read_text()
        for match in re.finditer(r"torch\.load\(([^()]|\([^()]*\))*\)", text):
            line = text[match.start():text.find("\n", match.end())]
            # a test may read back a file it wrote itself, saying so on the line
            trusted = relative.parts[0] == "tests" and "# trusted: written by this test" in line
            calls.append((f"{relative}: {match.group()}", "weights_only=True" in match.group() or trusted))
    assert len(calls) >= 3
    assert [where for where, safe in calls if not safe] == []
