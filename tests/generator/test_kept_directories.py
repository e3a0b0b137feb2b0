"""What a run writes and keeps past its pod (OUTPUT_DIR, EXPORT_DIR, the checkpoint directory) must be on a volume
a pod writes to: a path elsewhere is refused at render time, naming the key and the fix, where in a pod it would
have failed (the root is read-only) or been lost with the pod (/tmp, /dev/shm). On Slurm any path will do."""

import pytest

from tests.generator.helpers import run_main

WITH_A_DATA_VOLUME = "extra_volumes=[{name: results, mount_path: /results, claim: results}]"


@pytest.mark.parametrize("sets, refused", [
    (["config_map.OUTPUT_DIR=/results"], "config_map.OUTPUT_DIR: /results is outside the volumes a pod writes to "
                                         "(the container's root is read-only)"),
    (["config_map.OUTPUT_DIR=/tmp/run"], "config_map.OUTPUT_DIR: /tmp/run is outside the volumes a pod writes to "
                                         "(each pod's own, lost with it and unseen by the other pods)"),
    (["config_map.OUTPUT_DIR=/pvc-home/../results"], "config_map.OUTPUT_DIR: /pvc-home/../results is outside"),
    (["config_map.EXPORT_DIR=/dev/shm/export"], "config_map.EXPORT_DIR: /dev/shm/export is outside"),
    (["env=[{name: OUTPUT_DIR, value: /opt/run}]"], "env.OUTPUT_DIR: /opt/run is outside"),
    (["config_map.OUTPUT_DIR=/pvc-homework"], "config_map.OUTPUT_DIR: /pvc-homework is outside"),
    (["config_map.OUTPUT_DIR=/pvc-home/runs/mine"], None),
    (["config_map.OUTPUT_DIR=/tmpfiles/run"], "(the container's root is read-only)"),
    ([WITH_A_DATA_VOLUME, "config_map.OUTPUT_DIR=/results/run"], None),
    ([WITH_A_DATA_VOLUME.replace("claim: results", "claim: results, read_only: true"),
      "config_map.OUTPUT_DIR=/results/run"], "config_map.OUTPUT_DIR: /results/run is outside"),
    (["config_map.DATA_DIR=/opt/data"], None),  # read, not kept: a dataset baked into the image may live anywhere
])
def test_a_kept_directory_outside_the_pods_volumes_is_refused_naming_the_key(sets, refused):
    result = run_main(*(arg for value in sets for arg in ("--set", value)))
    if refused is None:
        assert result.exit_code == 0, result.stderr
        return
    assert result.exit_code != 0 and result.stdout == ""
    line = result.stderr.strip().splitlines()[-1]
    assert refused in line and "put it under the shared volume /pvc-home/" in line, result.stderr


def test_on_slurm_a_path_of_the_nodes_is_taken():
    result = run_main("--target", "slurm", "--set", "slurm.shared_dir=/scratch/me", "--set",
                      "config_map.OUTPUT_DIR=/results/run")
    assert result.exit_code == 0, result.stderr
    assert "export OUTPUT_DIR=/results/run\n" in result.stdout
