"""Exports to a bucket (trainer_stager/upload.py) against moto's S3 server: every file, then the listing object
last; the same files again transfer nothing; an upload cut off never shows as complete."""

from __future__ import annotations

import os

import pytest

from testbed.storage_servers import s3_in_this_process
from trainer_contract import storage
from trainer_stager import upload
from trainer_stager.errors import StagingError
from trainer_stager.upload import complete_record, upload_directory


@pytest.fixture(scope="module")
def s3():
    with s3_in_this_process() as server:  # the code under test runs in this process
        server.client().create_bucket(Bucket="team-models")
        yield server


def _export(tmp_path, files: dict[str, bytes]):
    directory = tmp_path / "export"
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return directory


def test_an_export_round_trips_and_its_listing_is_written_last(s3, tmp_path):
    files = {"model.pt": os.urandom(50_000), "model.json": b"{}", "tokenizer/vocab.txt": b"a\nb\n"}
    uri = storage.parse("s3://team-models/mnist/run-1", "export")
    said: list[str] = []
    upload_directory(uri, _export(tmp_path, files), said.append)
    client = s3.client()
    for name, data in files.items():
        assert client.get_object(Bucket="team-models", Key=f"mnist/run-1/{name}")["Body"].read() == data
    record = complete_record(client, uri)
    assert set(record["files"]) == set(files) and record["files"]["model.pt"]["bytes"] == 50_000
    assert said == ["uploaded 3 files (0.1 MB) to s3://team-models/mnist/run-1"]

    again: list[str] = []
    upload_directory(uri, _export(tmp_path, files), again.append)
    assert again == ["s3://team-models/mnist/run-1 already holds these 3 files: nothing uploaded"]


def test_links_out_of_the_export_are_skipped_with_a_line_never_followed(s3, tmp_path):
    outside = tmp_path / "outside"
    (outside / "secrets").mkdir(parents=True)
    (outside / "credentials").write_bytes(b"aws_secret_access_key = planted")
    (outside / "secrets" / "token").write_bytes(b"hf_planted")
    directory = _export(tmp_path, {"model.pt": b"weights", "sub/card.md": b"# card"})
    (directory / "creds").symlink_to(outside / "credentials")
    (directory / "sub" / "more").symlink_to(outside / "secrets", target_is_directory=True)
    os.mkfifo(directory / "pipe")  # reading it would block the upload forever
    uri = storage.parse("s3://team-models/mnist/run-links", "export")
    said: list[str] = []
    upload_directory(uri, directory, said.append)
    keys = {item["Key"] for item in s3.client().list_objects_v2(Bucket="team-models", Prefix="mnist/run-links/")["Contents"]}
    assert keys == {"mnist/run-links/model.pt", "mnist/run-links/sub/card.md", f"mnist/run-links/{storage.COMPLETE_OBJECT}"}
    assert sorted(line.split(":")[0] for line in said if line.startswith("skipped")) == [
        "skipped creds", "skipped pipe", "skipped sub/more"]
    assert said[-1] == "uploaded 2 files (0.0 MB) to s3://team-models/mnist/run-links"


def test_an_upload_cut_off_never_shows_as_complete(s3, tmp_path, monkeypatch):
    uri = storage.parse("s3://team-models/mnist/run-2", "export")
    directory = _export(tmp_path, {"a.bin": b"a", "b.bin": b"b"})
    upload_directory(uri, directory, lambda _: None)
    (directory / "a.bin").write_bytes(b"a changed")

    class CutOff:  # the real client, whose upload of b.bin is cut off
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def put_object(self, **kwargs):
            if kwargs["Key"].endswith("b.bin"):
                raise ConnectionResetError("connection reset by peer")
            return self.real.put_object(**kwargs)

    real_client = upload.client
    monkeypatch.setattr(upload, "client", lambda: CutOff(real_client()))
    with pytest.raises(StagingError) as raised:
        upload_directory(uri, directory, lambda _: None)
    assert raised.value.retryable  # the launcher exits 69: the pod is restarted and uploads again
    assert complete_record(s3.client(), uri) is None  # the old listing is gone, no new one was written
    monkeypatch.setattr(upload, "client", real_client)
    upload_directory(uri, directory, lambda _: None)  # the retry completes it
    assert complete_record(s3.client(), uri)["files"]["a.bin"]["bytes"] == len(b"a changed")


def test_nothing_to_upload_is_refused_with_the_directory_named(s3, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(StagingError, match="holds no file") as raised:
        upload_directory(storage.parse("s3://team-models/x", "export"), tmp_path / "empty", print)
    assert not raised.value.retryable


def test_with_replica_groups_only_the_group_that_wrote_the_model_uploads_the_export(s3, tmp_path, monkeypatch):
    """Every group's launcher ends its pod through the same path (the writer's after its export, the others' when
    the Job ends them, or at once on Slurm): only the one the finished run's summary names uploads."""
    import json

    import worker.launch  # noqa: F401  (the built-in programs' finished runs, as the launcher knows them)
    from trainer_contract.launcher import BUILT_IN_WORKER
    from trainer_launcher import launch

    output, exported = tmp_path / "run", _export(tmp_path, {"model.pt": b"weights", "model.json": b"{}"})
    output.mkdir()
    (output / "model.pt").write_bytes(b"weights")
    (output / "model.json").write_text(json.dumps({"config": {}, "accuracy": 0.9, "epochs": 1,
                                                   "written_by_group": 1}))
    uri = "s3://team-models/mnist/groups"
    monkeypatch.setenv("OUTPUT_DIR", str(output))
    args = launch.parse_args(["--nnodes=1", "--node-rank=0", "-m", BUILT_IN_WORKER])
    environ = {storage.URI_VARIABLES["export"]: uri, storage.EXPORT_VARIABLE: str(exported), "REPLICA_GROUPS": "3"}
    client = s3.client()
    assert launch.upload_export(args, {**environ, "REPLICA_GROUP": "0"}) == 0
    assert "Contents" not in client.list_objects_v2(Bucket="team-models", Prefix="mnist/groups/")
    assert launch.upload_export(args, {**environ, "REPLICA_GROUP": "1"}) == 0
    assert complete_record(client, storage.parse(uri, "export"))["files"].keys() == {"model.pt", "model.json"}
