"""gen-manifests as users run it: the real console script in a subprocess, and the entry point in-process."""

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import BIN, OUTSIDE, ROOT
from tests.generator.helpers import run_main


def test_default_render_is_a_four_document_stream_in_apply_order(gen):
    result = gen("--values", str(ROOT / "variables" / "variables.json"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout)]
    assert kinds == ["PersistentVolumeClaim", "ConfigMap", "Service", "Job"]


def test_invalid_values_print_nothing_on_stdout_and_exit_2(gen, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("replicas: -1\nresources: {cpu: lots}\n")
    result = gen("--values", str(bad), "--set", "nmae=x")
    assert result.returncode == 2
    assert result.stdout == b""
    errors = result.stderr.decode().splitlines()
    assert "gen-manifests: error: nmae: unknown key (did you mean 'name'?)" in errors
    assert "gen-manifests: error: replicas: -1 must be at least 1" in errors
    assert 'gen-manifests: error: resources.cpu: must be number (in cores), not a string ("lots")' in errors
    assert b"Traceback" not in result.stderr


def test_same_input_gives_identical_bytes_across_processes(gen):
    first = gen("--set", "labels={b: '2', a: '1'}", env={"PYTHONHASHSEED": "1"})
    second = gen("--set", "labels={b: '2', a: '1'}", env={"PYTHONHASHSEED": "2"})
    assert first.returncode == 0 and first.stdout == second.stdout


def test_later_files_and_sets_win(tmp_path):
    one, two = tmp_path / "one.yaml", tmp_path / "two.json"
    one.write_text("replicas: 3\nconfig_map: {EPOCHS: '9'}\n")
    two.write_text(json.dumps({"replicas": 5}))
    result = run_main("--values", str(one), "--values", str(two), "--set", "config_map.BATCH_SIZE=32",
                      "--print-values")
    values = json.loads(result.stdout)
    assert values["replicas"] == 5
    assert values["config_map"] == {"EPOCHS": "9", "BATCH_SIZE": 32}


def test_output_dir_gets_one_file_per_object_and_drops_stale_ones(tmp_path):
    out = tmp_path / "build"
    assert run_main("--output-dir", str(out)).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".gen-manifests", "1-persistentvolumeclaim.yaml", "2-configmap.yaml", "3-service.yaml", "4-job.yaml"]
    (out / "notes.txt").write_text("mine")
    result = run_main("--output-dir", str(out), "--set", "shared_volume.existing_claim=data")
    assert result.exit_code == 0 and result.stdout == ""
    assert sorted(p.name for p in out.iterdir()) == [
        ".gen-manifests", "2-configmap.yaml", "3-service.yaml", "4-job.yaml", "notes.txt"]


def test_failed_render_leaves_previous_output_untouched(tmp_path):
    out = tmp_path / "build"
    run_main("--output-dir", str(out))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert run_main("--output-dir", str(out), "--set", "replicas=0").exit_code == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_output_dir_that_is_a_file_exits_3(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run_main("--output-dir", str(blocker / "sub"))
    assert result.exit_code == 3
    assert result.stderr.startswith(f"gen-manifests: error: --output-dir {blocker / 'sub'}: cannot write")


def test_check_validates_without_printing():
    result = run_main("--check", "--set", "replicas=4")
    assert result.exit_code == 0 and result.stdout == ""
    assert "values are valid (4 objects)" in result.stderr
    assert run_main("--check", "--set", "replicas=x").exit_code == 2


def test_print_schema_prints_the_json_schema():
    result = run_main("--print-schema")
    schema = json.loads(result.stdout)
    assert schema["additionalProperties"] is False and "replicas" in schema["properties"]


def test_missing_values_file_is_a_clear_error():
    result = run_main("--values", "/nonexistent/values.yaml")
    assert result.exit_code == 2
    assert result.stderr == "gen-manifests: error: /nonexistent/values.yaml: cannot read: No such file or directory\n"


def test_unknown_option_is_a_usage_error(gen):
    result = gen("--replicas", "3")
    assert result.returncode == 2 and result.stdout == b""
    assert b"No such option" in result.stderr


def test_non_ascii_values_survive_a_c_locale(gen):
    result = gen("--set", "annotations.owner=🙂 Zoë", env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": ""})
    assert result.returncode == 0, result.stderr
    job = list(yaml.safe_load_all(result.stdout.decode("utf-8")))[-1]
    assert job["metadata"]["annotations"]["owner"] == "🙂 Zoë"


@pytest.mark.parametrize("target", ["kubernetes", "slurm"])
def test_importing_and_running_the_cli_loads_no_torch(target):
    """gen-manifests reads the worker's torch-free interface (trainer_contract), never torch, for either target."""
    code = (
        "import sys\n"
        "from generator.cli import main\n"
        f"try:\n    main(['--check', '--target', '{target}'])\nexcept SystemExit:\n    pass\n"
        "print(','.join(sorted(m for m in ('torch', 'torchvision', 'numpy', 'worker.mnist.train', 'worker.launch')\n"
        "                      if m in sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=OUTSIDE, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_console_script_is_installed_next_to_the_interpreter():
    assert (BIN / "gen-manifests").exists()


MEASURED = """import json, resource, subprocess, sys, time
started = time.monotonic()
result = subprocess.run(sys.argv[1:], capture_output=True, text=True)
json.dump({"code": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
           "seconds": time.monotonic() - started,
           "max_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}, sys.stdout)
"""


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_a_100_mb_values_file_is_refused_fast_and_small(tmp_path, suffix):
    """Exit 2 naming the file, nothing on stdout, nothing written, in bounded time and memory: the size is
    checked before a byte is parsed."""
    big = tmp_path / f"values.{suffix}"
    with big.open("wb") as handle:
        chunk = (b'{"replicas": 1, "labels": {"a": "' + b"x" * 1_000_000 + b'"}}\n') if suffix == "json" else (
            b"replicas: 1\n# " + b"x" * 1_000_000 + b"\n")
        for _ in range(100):
            handle.write(chunk)
    assert big.stat().st_size >= 100_000_000
    out = tmp_path / "out"
    measured = subprocess.run([sys.executable, "-c", MEASURED, str(BIN / "gen-manifests"), "--values", str(big),
                               "--output-dir", str(out)], capture_output=True, text=True, timeout=120)
    report = json.loads(measured.stdout)
    assert report["code"] == 2 and report["stdout"] == ""
    assert report["stderr"] == f"gen-manifests: error: {big}: larger than 4 MiB; a values file is a small configuration\n"
    assert not out.exists()
    assert report["seconds"] < 10 and report["max_rss_kib"] < 200 * 1024  # never read in: far below its 100 MB


def test_keys_of_the_other_target_are_named_as_ignored():
    """The schema's x-targets says which keys mean nothing on a target: set, they are named on stderr."""
    on_kubernetes = run_main("--set", "slurm.partition=gpu")
    assert on_kubernetes.exit_code == 0
    assert on_kubernetes.stderr == "gen-manifests: warning: ignored on Kubernetes: slurm.partition\n"
    assert on_kubernetes.stdout == run_main().stdout
    on_slurm = run_main("--target", "slurm", "--set", "namespace=ml", "--set", "shm_size=2")
    assert on_slurm.stderr == "gen-manifests: warning: ignored on Slurm: namespace, shm_size\n"
