"""Staging, export and checkpoint mirroring through local-job, as on a cluster: 2 pods, each with the rendered
"stage" init container; moto's S3 (a real S3 server on 127.0.0.1), credentials from a Secret (local-job --secret).
MNIST from a bucket: index 0 stages it once, index 1 waits, both train; index 0's launcher uploads the export,
which round-trips; a second run fetches nothing. Checkpoints mirrored: a run killed on one volume resumes on a
new, empty volume from the newest complete checkpoint in the bucket, at the epoch it holds."""

from __future__ import annotations

import json
import re

import pytest

from testbed.storage_servers import S3Server
from tests.localjob.test_local_job_runs import SMALL, run_local_job, volume
from tests.mnist.launch import fault_env, recorded_epochs
from tests.rendering import gen_manifests
from trainer_contract import storage
from trainer_contract.exit_codes import BAD_CONFIG

pytestmark = pytest.mark.slow
CLAIM = "staged-mnist-data"


def test_mnist_from_a_bucket_is_staged_once_and_trains_to_the_documented_accuracy(tmp_path):
    s3 = S3Server()
    try:
        client = s3.with_mnist("team-models")
        secret = tmp_path / "s3-credentials.env"
        secret.write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n")
        manifests = gen_manifests("name=staged-mnist", "replicas=2", "config_map={EPOCHS: '2', DOWNLOAD: 'false'}",
                                  "initializer.dataset.storage_uri=s3://team-data/mnist",
                                  "export.storage_uri=s3://team-models/mnist/run-1",
                                  "env_from_secrets=[s3-credentials]")
        claim = tmp_path / "volume"
        claim.mkdir()
        env = {"AWS_ENDPOINT_URL": s3.url, "AWS_DEFAULT_REGION": "us-east-1"}
        extra = [f"--secret=s3-credentials={secret}"]
        result, log, status = run_local_job(tmp_path, manifests, claim, CLAIM, env=env, extra=extra)
        assert result.returncode == 0, log[-4000:] + result.stderr.decode()[-2000:]
        assert re.search(r"^\[staged-mnist-0-\w{5}/stage\] stage: dataset s3://team-data/mnist staged at ", log, re.M)
        assert re.search(r"^\[staged-mnist-1-\w{5}/stage\] stage: (waiting for index 0|dataset s3://team-data/mnist "
                         r"staged at .* by index 0)", log, re.M)
        place = claim / "staged/datasets/s3/team-data%2Fmnist"
        assert json.loads((place / storage.MARKER).read_text())["bucket"] == "team-data"
        summary = json.loads((claim / "runs/staged-mnist/model.json").read_text())
        assert summary["accuracy"] >= 0.95, summary  # 2 epochs; the 5-epoch run reaches 0.985
        assert "testing" not in log.replace("s3://", "")  # the Secret's values are never printed
        # the export, in the bucket: every file as on the volume, the listing last
        export = claim / "runs/staged-mnist/export"
        listing = json.loads(client.get_object(Bucket="team-models", Key=f"mnist/run-1/{storage.COMPLETE_OBJECT}")
                             ["Body"].read())
        assert set(listing["files"]) == {"model.pt", "model.json", "metrics.jsonl", "README.md"}
        for name in listing["files"]:
            stored = client.get_object(Bucket="team-models", Key=f"mnist/run-1/{name}")["Body"].read()
            assert stored == (export / name).read_bytes(), name
        assert (export / "model.pt").read_bytes() == (claim / "runs/staged-mnist/model.pt").read_bytes()
        assert re.search(r"^\[staged-mnist-0-\w{5}\] launcher: uploaded 4 files .* to s3://team-models/mnist/run-1",
                         log, re.M)

        # the rerun stages nothing (the marker), finds the run complete and the export already in the bucket
        rerun, log, _ = run_local_job(tmp_path, manifests, claim, CLAIM, env=env, extra=extra)
        assert rerun.returncode == 0, log[-3000:]
        assert "is already staged at" in log and "nothing fetched" in log
        assert "already holds these 4 files: nothing uploaded" in log
    finally:
        s3.close()


def test_a_run_killed_on_one_volume_resumes_on_an_empty_one_from_the_bucket(tmp_path):
    """Under fsdp, 2 pods: each pod uploads its own rank's shard of every checkpoint, and on the empty volume each
    fetches a share of the newest back (bucket_shares.py), which the stage step leaves to them."""
    s3 = S3Server()
    try:
        s3.client().create_bucket(Bucket="team-ckpt")
        secret = tmp_path / "s3-credentials.env"
        secret.write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n")
        manifests = gen_manifests("name=staged-mnist", "replicas=2",
                                  "config_map={EPOCHS: '3', DOWNLOAD: 'false', STRATEGY: fsdp}",
                                  "checkpoint.storage_uri=s3://team-ckpt/mnist", "env_from_secrets=[s3-credentials]")
        env = {"AWS_ENDPOINT_URL": s3.url, "AWS_DEFAULT_REGION": "us-east-1"}
        extra = [f"--secret=s3-credentials={secret}"]
        # the first cluster: epoch 3 never ends there (78 fails the Job at once); its checkpoints are in the bucket
        first = volume(tmp_path, SMALL, "first-volume")
        fault = fault_env(f"sleep=3@batch=3.1,rank=0; exit={BAD_CONFIG}@batch=3.1,rank=0")
        killed, log, _ = run_local_job(tmp_path, manifests, first, CLAIM, env={**env, **fault}, extra=extra)
        assert killed.returncode != 0, log[-3000:]
        assert re.search(r"^\[staged-mnist-0-\w{5}\] Rank 0: checkpoint mirror: ckpt-e0002-s000000\.dcp uploaded to "
                         r"s3://team-ckpt/mnist/ckpt-e0002-s000000\.dcp by 2 ranks at once \(", log, re.M), log[-3000:]
        assert re.search(r"^\[staged-mnist-0-\w{5}/stage\] stage: s3://team-ckpt/mnist holds no complete "
                         r"checkpoint: training starts from the beginning$", log, re.M)
        written = first / "runs/staged-mnist/checkpoints/ckpt-e0002-s000000.dcp"
        for shard in ("__0_0.distcp", "__1_0.distcp"):
            mirrored = s3.client().get_object(Bucket="team-ckpt", Key=f"mnist/ckpt-e0002-s000000.dcp/{shard}")
            assert mirrored["Body"].read() == (written / shard).read_bytes()

        # another cluster, a new volume: each pod fetches a share of epoch 2's checkpoint, the run trains epoch 3 only
        second = volume(tmp_path, SMALL, "second-volume")
        resumed, log, status = run_local_job(tmp_path, manifests, second, CLAIM, env=env, extra=extra)
        assert resumed.returncode == 0, log[-4000:] + resumed.stderr.decode()[-2000:]
        assert re.search(r"^\[staged-mnist-0-\w{5}/stage\] stage: checkpoint ckpt-e0002-s000000\.dcp of "
                         r"s3://team-ckpt/mnist is sharded \(\d+ files\): the program's ranks fetch it", log, re.M), \
            log[-4000:]
        assert re.search(r"^\[staged-mnist-1-\w{5}/stage\] stage: index 0 decided: checkpoint ckpt-e0002", log, re.M)
        assert re.search(r"^\[staged-mnist-0-\w{5}\] Rank 0: checkpoint ckpt-e0002-s000000\.dcp restored from "
                         r"s3://team-ckpt/mnist into \S+ by 2 ranks at once", log, re.M), log[-4000:]
        assert "Rank 0: resuming from ckpt-e0002-s000000.dcp" in log
        output = second / "runs/staged-mnist"
        assert recorded_epochs(output) == [3]  # no epoch twice, none missing: 1 and 2 are the first cluster's
        assert json.loads((output / "model.json").read_text())["accuracy"] >= 0.9
        listed = s3.client().list_objects_v2(Bucket="team-ckpt", Prefix="mnist/")["Contents"]
        assert {item["Key"].split("/")[1] for item in listed} >= {"ckpt-e0002-s000000.dcp", "ckpt-e0003-s000000.dcp"}
        assert "testing" not in log.replace("s3://", "")
    finally:
        s3.close()


def test_a_stage_job_of_its_own_stages_before_the_training_job_starts_and_its_failure_ends_the_run(tmp_path):
    """initializer.separate_job: local-job runs Job staged-mnist-stage to its end first, as ./run.sh and Argo CD's
    sync waves apply them (its one pod stages the digits from the bucket, CPU and memory only), then the training
    Job, whose pods' stage step finds them staged by that Job and both train. A stage Job that cannot stage (no
    such bucket: 78) fails the run, and the training Job never starts."""
    s3 = S3Server()
    try:
        client = s3.client()
        client.create_bucket(Bucket="team-data")
        for name, data in SMALL.items():
            client.put_object(Bucket="team-data", Key=f"mnist/MNIST/raw/{name}", Body=data)
        secret = tmp_path / "s3-credentials.env"
        secret.write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n")
        env = {"AWS_ENDPOINT_URL": s3.url, "AWS_DEFAULT_REGION": "us-east-1"}
        extra = [f"--secret=s3-credentials={secret}"]

        def run(bucket: str, claim):
            return run_local_job(tmp_path, gen_manifests(
                "name=staged-mnist", "replicas=2", "config_map={EPOCHS: '1', DOWNLOAD: 'false'}",
                f"initializer.dataset.storage_uri=s3://{bucket}/mnist", "initializer.separate_job=true",
                "env_from_secrets=[s3-credentials]"), claim, CLAIM, env=env, extra=extra)

        claim = tmp_path / "volume"
        claim.mkdir()
        result, log, status = run("team-data", claim)
        assert result.returncode == 0, log[-4000:] + result.stderr.decode()[-2000:]
        stage = log.index("Job staged-mnist-stage complete")
        assert re.search(r"^\[staged-mnist-stage-0-\w{5}\] stage: dataset s3://team-data/mnist staged at ", log, re.M)
        for index in (0, 1):  # every training pod's stage step waits for the stage Job, and begins after it ended
            said = re.search(rf"^\[staged-mnist-{index}-\w{{5}}/stage\] stage: dataset s3://team-data/mnist staged "
                             r"at .* by Job staged-mnist-stage \(", log, re.M)
            assert said and said.start() > stage, log[-4000:]
        assert json.loads((claim / "runs/staged-mnist/model.json").read_text())["accuracy"] > 0.5
        assert status["condition"]["type"] == "Complete"

        empty = tmp_path / "empty-volume"
        empty.mkdir()
        failed, log, _ = run("no-such-bucket", empty)
        assert failed.returncode == 1, log[-3000:]
        assert "Job staged-mnist-stage failed after" in log and "[staged-mnist-0-" not in log, log[-3000:]
    finally:
        s3.close()
