"""What `pip install` gets: the wheel and the sdist hold every module and data file of the tree (packages
are found, not listed), and a plain install of the wheel renders from its own files."""

import subprocess
import sys
import tarfile
import zipfile

import pytest
import yaml

from tests.conftest import OUTSIDE, PRODUCT_PACKAGES, ROOT

# The source folders and where their files land in the installed package (setup.cfg's package_dir).
SHIPPED = {**{package: package for package in PRODUCT_PACKAGES},
           "templates": "generator/templates", "variables": "generator/variables"}
SHIPPED_SUFFIXES = (".py", ".j2", ".json", ".gz")


def tree_files() -> set[str]:
    """Every shippable file of the checkout (git's view: tracked and not ignored), as installed paths."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *SHIPPED],
                            capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    files = set()
    for path in listed:
        folder, _, rest = path.partition("/")
        if path.endswith(SHIPPED_SUFFIXES) or path.endswith("mnist-sample/README.md"):
            files.add(f"{SHIPPED[folder]}/{rest}")
    return files


@pytest.fixture(scope="module")
def installed(tmp_path_factory, built_wheel):
    target = tmp_path_factory.mktemp("install") / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(built_wheel)], check=True, timeout=300, capture_output=True)
    return target


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="lists the tree with git")
def test_the_wheel_holds_every_module_and_data_file_of_the_tree(built_wheel):
    with zipfile.ZipFile(built_wheel) as wheel:
        shipped = {name for name in wheel.namelist() if name.split("/")[0] in PRODUCT_PACKAGES}
    expected = tree_files()
    assert "trainer_runtime/strategies/fsdp.py" in expected and "generator/templates/kubernetes/job.yaml.j2" in expected
    assert expected - shipped == set(), "missing from the wheel"
    assert {name for name in shipped if not name.endswith(".pyc")} - expected == set(), "in the wheel, not the tree"


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="lists the tree with git")
def test_a_wheel_built_from_the_sdist_is_the_same_wheel(tmp_path, built_wheel):
    sdists, wheels = tmp_path / "sdist", tmp_path / "wheel"
    subprocess.run([sys.executable, "-c", "import sys; from setuptools.build_meta import build_sdist; "
                    "build_sdist(sys.argv[1])", str(sdists)], check=True, cwd=ROOT, capture_output=True, timeout=300)
    sdist = next(sdists.glob("indexed_trainer-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "src", filter="data")
    source = next((tmp_path / "src").iterdir())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(source)], check=True, capture_output=True, timeout=300, cwd=OUTSIDE)
    with zipfile.ZipFile(next(wheels.glob("*.whl"))) as from_sdist, zipfile.ZipFile(built_wheel) as from_tree:
        assert sorted(from_sdist.namelist()) == sorted(from_tree.namelist())


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

