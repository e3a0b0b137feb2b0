"""docs/guides.md's commands as written: the CSV guide run by local-job (4 processes on the CPUs where the values
ask for 4 GPUs and its render for this machine allows the CPU fallback; moto's S3 at the 127.0.0.1:9000 its values name standing in for MinIO; the tests' Hub for the
Hugging Face Hub), the Slurm guide rendered (two 8-GPU nodes are not here: tests/slurm/test_on_slurm.py runs its
values, with the test cluster's partition and no GPUs, on the real Slurm)."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def guide_world(tmp_path, model_dir, repo_id: str, buckets: tuple[str, ...]):
    """What a guide's commands meet here: moto's S3 at the guide's 127.0.0.1:9000 with ``buckets``, the tests' Hub
    serving ``model_dir`` as ``repo_id``, examples/ beside the commands and a fresh user's environment; yields
    (S3 client, Hub, environment)."""
    from testbed.storage_servers import HubServer, S3Server, port_is_free

    assert port_is_free(9000), "127.0.0.1:9000 is taken: this test serves the guide's S3 there"
    s3, hub = S3Server(port=9000), HubServer()
    try:
        hub.add(repo_id, {path.name: path.read_bytes() for path in model_dir.iterdir()})
        client = s3.client()
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        (tmp_path / "examples").symlink_to(ROOT / "examples")
        yield client, hub, {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path), **ROOT_ALLOWANCE,
                            "XDG_STATE_HOME": str(tmp_path / "state")}
    finally:
        s3.close()
        hub.close()


def quietly(commands: list[str], tmp_path, env: dict) -> None:
    """Each command succeeds and says nothing on stderr (no warning either)."""
    for command in commands:
        rendered = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=120)
        assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr


@pytest.mark.slow
def test_the_csv_guide_stages_from_the_bucket_trains_on_four_processes_and_mirrors_its_checkpoints(tmp_path):
    pytest.importorskip("transformers")
    from testbed.qa_data import make_model
    from testbed.text_data import rows

    render, render_on_cpus, run = commands("csv-on-one-node")
    model = make_model(tmp_path / "model")
    with guide_world(tmp_path, model, "distilbert/distilbert-base-uncased", ("team-data", "team-checkpoints")) as \
            (client, hub, env):
        for split, count, seed in (("train", 256, 1), ("validation", 64, 2)):
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(rows(count, seed))
            client.put_object(Bucket="team-data", Key=f"reviews/{split}.csv", Body=text.getvalue().encode())
        (tmp_path / "minio.env").write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n")
        quietly([render, render_on_cpus], tmp_path, env)
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


def public_conversations(tmp_path, count: int) -> bytes:
    """``count`` conversations as a parquet file with a messages column, as a Hub dataset holds them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from testbed.sft_data import make_chat_data

    rows = [json.loads(line) for line in (make_chat_data(tmp_path / "public", train=count, validation=0, seed=1)
                                          / "train.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "public.parquet")
    return (tmp_path / "public.parquet").read_bytes()


@pytest.mark.slow
def test_the_lora_guide_renders_for_two_infiniband_nodes_and_its_values_train_on_this_machine(tmp_path):
    """The 7B LoRA guide as written: its cluster render (Kueue's suspended Job, 8 GPUs and the RDMA resource per
    pod, NCCL's verbs transport, no warning), then its values on this machine's CPUs, one process per pod, with the
    tests' tiny Llama served as Qwen/Qwen2.5-7B-Instruct and 4,000 short conversations under the guide's S3 prefix:
    the guide's own hyper-parameters (4,096-token packed blocks, 2 x 8 a step per process, 2 % held out, the best
    checkpoint by loss) stage, train, evaluate and export the merged model to the bucket; the support conversations
    and a public set from the Hub (400, as parquet) mixed 3:1, each staged under its name."""
    pytest.importorskip("peft")
    from testbed.sft_data import make_chat_data, make_model

    render, render_on_cpus, run = commands("lora-on-16-gpus")
    model = make_model(tmp_path / "model")
    with guide_world(tmp_path, model, "Qwen/Qwen2.5-7B-Instruct", ("team-data", "team-checkpoints", "team-models")) \
            as (client, hub, env):
        chats = make_chat_data(tmp_path / "chats", train=4000, validation=0)
        lines = (chats / "train.jsonl").read_text().splitlines(keepends=True)
        for part in range(2):
            client.put_object(Bucket="team-data", Key=f"support-chats/conversations/part-{part:05d}.jsonl",
                              Body="".join(lines[part::2]).encode())
        hub.add("HuggingFaceH4/no_robots", {"data/train-00000-of-00001.parquet": public_conversations(tmp_path, 400),
                                            "data/test-00000-of-00001.parquet": b"not staged", "README.md": b"#"},
                repo_type="dataset")
        (tmp_path / "s3.env").write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n")
        quietly([render, render_on_cpus], tmp_path, env)
        cluster = (tmp_path / "support.yaml").read_text()
        for line in ('"NCCL_IB_DISABLE": "0"', "suspend: true", '"kueue.x-k8s.io/queue-name": "team-gpus"',
                     '"rdma/ib": "1"', '"nvidia.com/gpu": "8"',
                     '"TRAIN_FILES": "support/conversations/*.jsonl,norobots/data/train-*.parquet"',
                     '"INDEXED_TRAINER_CPU_FALLBACK": "false"'):
            assert line in cluster, line
        ran = subprocess.run(["bash", "-c", f"{run} --env HF_ENDPOINT={hub.url}"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=900)
        log = ran.stdout + ran.stderr
        assert ran.returncode == 0, log[-4000:]
        assert "held-out examples" in log and "(EVAL_FRACTION; SEED chose the rows)" in log, log[-4000:]
        # 2 % of each held out (80 and 8), then 3:1 of the 4,312 left: the Hub's 392 repeated whole, then sampled
        assert ("datasets mixed by TRAIN_WEIGHTS: support/conversations/*.jsonl x3 (3,234 rows of 3,920), "
                "norobots/data/train-*.parquet x1 (1,078 rows of 392)") in log, log[-4000:]
        staged = next((tmp_path / "state").rglob("staged/datasets/mixed/*"))
        assert sorted(path.name for path in staged.iterdir() if not path.name.startswith(".")) == ["norobots", "support"]
        assert [path.name for path in (staged / "norobots" / "data").iterdir()] == ["train-00000-of-00001.parquet"]
        assert "(32 examples a step: BATCH_SIZE 2 x GRADIENT_ACCUMULATION_STEPS 8 x 2 processes)" in log, log[-4000:]
        output = next((tmp_path / "state").rglob("runs/support-sft"))
        summary = json.loads((output / "summary.json").read_text())
        assert summary["world_size"] == 2 and summary["best_checkpoint"]["metric"] == "loss"
        keys = {item["Key"] for item in client.list_objects_v2(Bucket="team-models")["Contents"]}
        assert any(key.startswith("support-sft/merged/") for key in keys), keys
        assert "testing" not in log.replace("s3://", "")  # the Secret's values are never printed
