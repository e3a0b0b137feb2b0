"""A regular (non-editable) install renders: templates, defaults and schema ship inside the package."""

import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("install")
    wheels, target = work / "wheels", work / "site"
    # Build the wheel from a copy-free source tree with this environment's setuptools (no network needed).
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, timeout=300, capture_output=True)
    wheel = next(wheels.glob("indexed_trainer-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, timeout=300, capture_output=True)
    return target


def test_installed_package_renders_from_its_own_files(installed, tmp_path):
    code = (
        "import generator, generator.resources as r, sys\n"
        "print(generator.__file__); print(r.templates_dir()); print(r.default_values_path())\n"
        "sys.stdout.flush()\n"
        "from generator.cli import main\n"
        "main(['--set', 'replicas=3'])\n"
    )
    # Run outside the checkout with the installed copy first on the path, so nothing comes from the source tree.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert result.returncode == 0, result.stderr
    module, templates, defaults, *stream = result.stdout.split("\n", 3)
    for path in (module, templates, defaults):
        assert path.startswith(str(installed)), path
    documents = list(yaml.safe_load_all(stream[0]))
    assert [doc["kind"] for doc in documents] == ["PersistentVolumeClaim", "ConfigMap", "Service", "Job"]
    assert documents[-1]["spec"]["completions"] == 3
