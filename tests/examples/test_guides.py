"""docs/guides.md's commands as written: the CSV guide run by local-job (4 processes on the CPUs where the values
ask for 4 GPUs and its render for this machine allows the CPU fallback; moto's S3 at the 127.0.0.1:9000 its values name standing in for MinIO; the tests' Hub for the
Hugging Face Hub), the Slurm guide rendered (two 8-GPU nodes are not here: tests/slurm/test_on_slurm.py runs its
values, with the test cluster's partition and no GPUs, on the real Slurm)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess

import pytest

from tests.conftest import BIN, ROOT, ROOT_ALLOWANCE

GUIDES = (ROOT / "docs" / "guides.md").read_text()


def commands(guide: str) -> list[str]:
    block = re.search(rf"<!-- guide: {guide} -->\n```sh\n(.*?)```", GUIDES, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.strip().splitlines()]


@pytest.mark.slow
def test_the_csv_guide_stages_from_the_bucket_trains_on_four_processes_and_mirrors_its_checkpoints(tmp_path):
    pytest.importorskip("transformers")
    from testbed.qa_data import make_model
    from testbed.storage_servers import HubServer, S3Server, port_is_free
    from testbed.text_data import rows

    render, render_on_cpus, run = commands("csv-on-one-node")
    assert port_is_free(9000), "127.0.0.1:9000 is taken: this test serves the guide's S3 there"
    s3, hub = S3Server(port=9000), HubServer()
    try:
        model = make_model(tmp_path / "model")
        hub.add("distilbert/distilbert-base-uncased", {path.name: path.read_bytes() for path in model.iterdir()})
        client = s3.client()
        for bucket in ("team-data", "team-checkpoints"):
            client.create_bucket(Bucket=bucket)
        for split, count, seed in (("train", 256, 1), ("validation", 64, 2)):
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(rows(count, seed))
            client.put_object(Bucket="team-data", Key=f"reviews/{split}.csv", Body=text.getvalue().encode())
        (tmp_path / "minio.env").write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n")
        (tmp_path / "examples").symlink_to(ROOT / "examples")
        env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path), **ROOT_ALLOWANCE,
               "XDG_STATE_HOME": str(tmp_path / "state")}
        for command in (render, render_on_cpus):
            rendered = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                      timeout=120)
            assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr
        # the cluster's render fails a pod without its GPUs; the one for this machine trains on the CPUs
        assert '"INDEXED_TRAINER_CPU_FALLBACK": "false"' in (tmp_path / "reviews.yaml").read_text()
        assert '"INDEXED_TRAINER_CPU_FALLBACK": "true"' in (tmp_path / "reviews-on-cpus.yaml").read_text()
        ran = subprocess.run(["bash", "-c", f"{run} --env HF_ENDPOINT={hub.url}"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=900)
        log = ran.stdout + ran.stderr
        assert ran.returncode == 0, log[-4000:]
        assert re.search(r"^\[reviews-0-\w{5}/stage\] stage: dataset s3://team-data/reviews staged at ", log, re.M), \
            log[-4000:]
        assert ("launcher: warning: this pod asked for 4 GPUs (resources.gpu.accelerator_count) but sees none: "
                "training on the CPU") in log
        assert "checkpoint mirror: uploaded " in log
        output = next((tmp_path / "state").rglob("runs/reviews"))
        summary = json.loads((output / "summary.json").read_text())
        assert summary["world_size"] == 4 and summary["config"]["batch_size"] == 16 and 0 <= summary["f1"] <= 100
        keys = {item["Key"] for item in client.list_objects_v2(Bucket="team-checkpoints")["Contents"]}
        assert any(key.startswith("reviews/step-") for key in keys), keys
        assert "testing" not in log.replace("s3://", "")  # the Secret's values are never printed
    finally:
        s3.close()
        hub.close()


def test_the_slurm_guide_renders_two_whole_gpu_nodes_with_its_logs_in_the_shared_directory(tmp_path):
    render, submit = commands("torchrun-on-slurm")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path), **ROOT_ALLOWANCE}
    rendered = subprocess.run(["bash", "-c", render], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
    assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr  # no warning: cpu and memory set
    script = (tmp_path / "pretrain.sbatch").read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --cpus-per-task=64", "#SBATCH --mem=491520M", "#SBATCH --gres=gpu:8",
                 "#SBATCH --exclusive", "#SBATCH --output=/scratch/alice/pretrain/logs/%x-%j.out",
                 "#SBATCH --signal=TERM@120", "cd /home/alice/pretrain || exit 78", "--nnodes=2 --nproc-per-node=8",
                 "exec torchrun "):
        assert line in script, line
    assert "trainer_launcher" not in script and "trainer_stager" not in script  # the nodes need PyTorch only
    assert submit.startswith("mkdir -p /scratch/alice/pretrain/logs && sbatch pretrain.sbatch")
