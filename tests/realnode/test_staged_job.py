"""The seeds' transformer jobs on the real node (examples/bert-squad: Lightning FSDP; examples/hub-finetune: DDP +
AMP): the model and dataset staged by index 0's stage init container from the tests' Hub and moto's S3, which the
pods reach over the node's bridge (HF_ENDPOINT and AWS_ENDPOINT_URL on the bridge's gateway, the bucket's
credentials from a Secret), both pods train, and rank 0 exports the model onto the volume. hub-finetune takes its
dataset from a bucket instead of the Hub, mirrors its checkpoints to one and uploads its export, and stages in a Job
of its own (initializer.separate_job) that ./run.sh applies and waits for before it applies the training Job.

Each training loop once per engine, not each workload: Lightning (which reads a pod's environment, KUBERNETES_PORT
among it) and the plain loop that finetune and sft share. examples/sft runs here in the image tier's restricted pods
(tests/image), on Slurm (tests/slurm) and under local-job (tests/examples)."""

import importlib
import json
import os
import subprocess

import pytest

from tests.conftest import BIN, ROOT
from tests.realnode.jobs import job, log, volume, wait_finished
from tests.realnode.node import GATEWAY

pytestmark = [pytest.mark.realnode, pytest.mark.slow]


BUCKETS = ("team-data", "team-ckpt", "team-models")


def with_buckets(s3, example: str) -> dict:
    """examples/hub-finetune's dataset in a bucket, and the values that stage it from there, mirror the checkpoints
    and upload the export, the credentials coming from the Secret s3-credentials."""
    from testbed.text_data import imdb_files

    client = s3.client()
    for bucket in BUCKETS:
        client.create_bucket(Bucket=bucket)
    for path, data in imdb_files().items():
        client.put_object(Bucket="team-data", Key=f"imdb/{path}", Body=data)
    # the stage step as a Job of its own (initializer.separate_job), which ./run.sh applies before the training Job
    return {"initializer": {"dataset": {"storage_uri": "s3://team-data/imdb"}, "separate_job": True},
            "checkpoint": {"storage_uri": f"s3://team-ckpt/{example}"},
            "export": {"storage_uri": f"s3://team-models/{example}"}, "env_from_secrets": ["s3-credentials"],
            "env": [{"name": "AWS_ENDPOINT_URL", "value": s3.url}, {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"}]}


def run_sh(node, workdir, files: list[str]) -> str:
    """./prepare.sh with the values ``files``, then ./run.sh, as a user with the node's kubeconfig types them:
    run.sh's output (it has applied the Job when it returns)."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "KUBECONFIG": str(node.plane.kubeconfig),
           "BUILD_DIR": str(workdir / "build")}
    result = subprocess.run(["bash", "-c", './prepare.sh "$@" && ./run.sh', "submit", *files], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def objects(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    client = s3.client()
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {item["Key"]: client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read() for item in listed}


@pytest.mark.parametrize(("example", "serve", "export", "score", "bucket"), [
    ("bert-squad", "testbed.qa_data:serve_squad_example", "bert_squad_trained", "f1", False),
    ("hub-finetune", "testbed.text_data:serve_imdb_example", "bert_classifier_trained", "accuracy", True),
], ids=["qa", "finetune"])
def test_the_seeds_jobs_are_staged_from_a_hub_over_the_bridge_train_and_export(node, worker_image, namespace, example,
                                                                               serve, export, score, bucket):
    from testbed.storage_servers import HubServer, S3Server

    name, workdir = namespace
    hub = HubServer(host=GATEWAY)  # where the pods reach this machine
    s3 = S3Server(host=GATEWAY) if bucket else None
    try:
        module, function = serve.split(":")
        getattr(importlib.import_module(module), function)(hub)
        claim = volume(node, name, workdir / "volume", example)  # the example's name is its Job's
        here = {"namespace": name, "image": worker_image, "image_pull_policy": "Never",
                "resources": {"cpu": 1, "memory": 4}, "env": [{"name": "HF_ENDPOINT", "value": hub.url}]}
        if s3 is not None:
            buckets = with_buckets(s3, example)
            here = {**here, **buckets, "env": here["env"] + buckets["env"]}
            node.kubectl("-n", name, "create", "secret", "generic", "s3-credentials",
                         "--from-literal=AWS_ACCESS_KEY_ID=testing", "--from-literal=AWS_SECRET_ACCESS_KEY=testing")
        (workdir / "node.json").write_text(json.dumps(here))
        files = ["--values", str(ROOT / "examples" / example / "values.yaml"), "--values", str(workdir / "node.json")]
        if s3 is None:
            rendered = subprocess.run([str(BIN / "gen-manifests"), *files], capture_output=True, text=True,
                                      check=True, timeout=60).stdout
            node.kubectl("apply", "-f", "-", stdin=rendered)
        else:
            submitted = run_sh(node, workdir, files)
            assert f"run.sh: Job {name}/{example}-stage complete" in submitted, submitted
            assert job(node, name, f"{example}-stage")["status"].get("succeeded") == 1
        assert wait_finished(node, name, name=example) == "Complete", job(node, name, example)["status"]
        status = job(node, name, example)["status"]
        assert status.get("failed", 0) == 0, status
        # staged once, by index 0's stage step: each weight and data file fetched from the Hub once
        fetched = [path for path in hub.fetched() if path.endswith((".safetensors", ".parquet", ".json", ".jsonl"))]
        assert hub.fetched(".safetensors") and len(fetched) == len(set(fetched)), fetched
        output = claim / "runs" / example
        summary = json.loads((output / "summary.json").read_text())
        assert summary["world_size"] == 2 and 0 <= summary[score] <= 100, summary
        # with export.storage_uri the export is EXPORT_DIR, the run's export/, which index 0's launcher uploads
        exported = output / ("export" if s3 is not None else export)
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {path.name for path in exported.iterdir()}
        assert (exported / "model.safetensors").stat().st_uid == 10001  # written by the pods' user
        if s3 is not None:
            assert not hub.fetched(".parquet")  # the dataset came from the bucket alone
            staging = node.get("-n", name, "pods", "-l", f"batch.kubernetes.io/job-name={example}")["items"]
            said = [log(node, name, pod["metadata"]["name"], "stage") for pod in staging]
            assert all(f"by Job {example}-stage" in text for text in said), said  # the training pods only waited
            uploaded = {key.rpartition("/")[2]: data for key, data in objects(s3, "team-models", example).items()}
            assert uploaded.get("model.safetensors") == (exported / "model.safetensors").read_bytes(), sorted(uploaded)
            assert objects(s3, "team-ckpt", example), "rank 0 mirrored no checkpoint to the bucket"
    finally:
        hub.close()
        if s3 is not None:
            s3.close()
