"""What local-job decides before any pod starts: where the volumes live, and a script that is not there."""

import os
import subprocess

import pytest

from localjob.podspec import training_script
from tests.conftest import BIN, OUTSIDE
from tests.rendering import gen_manifests

render = gen_manifests


@pytest.mark.parametrize("argv, script", [
    (["torchrun", "--nnodes=2", "--node-rank=$(JOB_COMPLETION_INDEX)", "train.py", "--epochs", "3"], "train.py"),
    (["python", "-m", "worker.launch", "--nnodes=1", "/app/train.py"], "/app/train.py"),
    (["torchrun", "--nnodes=1", "-m", "worker"], None),
    (["torchrun", "--nnodes", "1", "train.py"], None),  # a flag's value as the next argument: not certain
    (["bash", "-c", "python train.py"], None),
    (["torchrun", "--standalone", "serve"], None),  # not a .py file: an executable of the image, perhaps
])
def test_the_training_script_is_found_only_where_it_is_certain(argv, script):
    assert training_script(argv) == script


def test_a_script_that_is_not_in_the_image_directory_is_refused_before_any_pod(tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    (image / "train.py").write_text("print('hello')\n")
    manifests = render("entrypoint.script=trian.py", "working_dir=/app")
    result = subprocess.run([str(BIN / "local-job"), "--volume-root", str(tmp_path / "root"), "--image-dir",
                             str(image)], input=manifests, capture_output=True, cwd=OUTSIDE)
    assert result.returncode == 2
    assert (f"local-job: cannot run these manifests: the container runs the script trian.py, which is not in the "
            f"image directory {image}; give the directory that holds it with --image-dir, or correct "
            "entrypoint.script") in result.stderr.decode()
    assert not (tmp_path / "root").exists()


@pytest.mark.slow
def test_the_default_volume_root_is_the_same_for_every_run_of_a_job(tmp_path):
    """Without --volume-root a rerun finds the first run's volume, as a claim outlives its Job."""
    image = tmp_path / "image"
    image.mkdir()
    (image / "count.py").write_text(
        "import os, pathlib\n"
        "out = pathlib.Path(os.environ['OUTPUT_DIR'])\n"
        "out.mkdir(parents=True, exist_ok=True)\n"
        "with (out / 'runs.txt').open('a') as f:\n"
        "    f.write('run\\n')\n")
    manifests = render("name=stable-root", "replicas=1", "entrypoint.script=count.py", "entrypoint.launcher=torchrun")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    for _ in range(2):
        result = subprocess.run([str(BIN / "local-job"), "--image-dir", str(image)], input=manifests,
                                capture_output=True, cwd=OUTSIDE, env=env, timeout=300)
        assert result.returncode == 0, result.stdout.decode()[-3000:]
    root = tmp_path / "state" / "local-job" / "default" / "stable-root"
    assert f"volumes, pod directories and logs under {root}" in result.stdout.decode()
    (counted,) = root.glob("volumes/*/runs/stable-root/runs.txt")
    assert counted.read_text() == "run\nrun\n"
