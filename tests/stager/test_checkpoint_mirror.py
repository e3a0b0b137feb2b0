"""Checkpoints mirrored to a bucket (checkpoint.storage_uri) against moto's S3 server: the mirror thread
(trainer_stager/checkpoint_mirror.py) uploads each published checkpoint, the listing last, and keeps in the bucket what
the volume keeps; the stager (python -m worker.staging, restore.py) restores the newest complete one onto a
volume with none, as index 0 while index 1 waits; a checkpoint cut off in the bucket is never restored."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from testbed.storage_servers import FileServer, s3_in_this_process
from tests.mnist.launch import fault_env
from tests.stager.test_staging import stager
from trainer_contract import checkpoint_layout as layout
from trainer_contract import storage
from trainer_contract.exit_codes import BAD_CONFIG, DATA_UNAVAILABLE, OK, PEER_LOST
from trainer_stager import checkpoint_bucket as remote
from trainer_stager.checkpoint_mirror import CheckpointMirror
from trainer_stager.place import Progress

BUCKET = "team-ckpt"


@pytest.fixture(scope="module")
def s3():
    with s3_in_this_process() as server:  # the code under test runs in this process
        server.client().create_bucket(Bucket=BUCKET)
        yield server


def publish(directory: Path, name: str, size: int = 40_000, sharded: bool = False) -> Path:
    """A checkpoint as the manager publishes it: a file, or (.dcp, ``sharded``) a directory of shards and a
    manifest."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    if sharded or name.endswith(".dcp"):
        path.mkdir()
        for part in ("__0_0.distcp", "__1_0.distcp", ".metadata", "manifest.json"):
            (path / part).write_bytes(os.urandom(size // 4))
    else:
        path.write_bytes(os.urandom(size))
    return path


def tree(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {path.name: path.read_bytes()}
    return {str(item.relative_to(path)): item.read_bytes() for item in sorted(path.rglob("*")) if item.is_file()}


def mirror_of(prefix: str, directory: Path, naming: layout.Naming = layout.EPOCH_STEP
              ) -> tuple[CheckpointMirror, list[str]]:
    said: list[str] = []
    return CheckpointMirror(storage.parse(f"s3://{BUCKET}/{prefix}", "checkpoint"), directory, naming,
                            said.append), said


def test_each_checkpoint_is_mirrored_and_the_bucket_keeps_what_the_volume_keeps(s3, tmp_path):
    directory = tmp_path / "checkpoints"
    uri = storage.parse(f"s3://{BUCKET}/run-a", "checkpoint")
    mirror, said = mirror_of("run-a", directory)
    for epoch in (1, 2):
        mirror.offer(publish(directory, f"ckpt-e{epoch:04d}-s000000.pt"))
    newest = publish(directory, "ckpt-e0003-s000000.pt")
    layout.prune(directory, 1)  # as the manager does (KEEP_CHECKPOINTS=1) before it offers the new one
    mirror.offer(newest)
    mirror.close()
    assert remote.listed(uri, layout.EPOCH_STEP) == {"ckpt-e0003-s000000.pt": True}
    record = json.loads(s3.client().get_object(
        Bucket=BUCKET, Key=f"run-a/ckpt-e0003-s000000.pt/{storage.COMPLETE_OBJECT}")["Body"].read())
    assert record["files"]["ckpt-e0003-s000000.pt"]["bytes"] == 40_000
    restored = tmp_path / "restored"
    remote.download(uri, "ckpt-e0003-s000000.pt", restored, Progress(restored, "checkpoint", print))
    assert tree(restored / "ckpt-e0003-s000000.pt") == tree(newest)
    assert "checkpoint mirror: uploaded 1 file (0.0 MB) to s3://team-ckpt/run-a/ckpt-e0003-s000000.pt" in said, said


def test_links_in_a_checkpoint_are_skipped_and_a_linked_entry_does_not_stop_the_mirror(s3, tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "credentials").write_bytes(b"planted")
    directory = tmp_path / "checkpoints"
    uri = storage.parse(f"s3://{BUCKET}/run-links", "checkpoint")
    said: list[str] = []

    def mirrored(checkpoint: Path) -> None:  # one at a time: the mirror uploads only the newest of those pending
        mirror, lines = mirror_of("run-links", directory, layout.OWN_PROGRAM)
        mirror.offer(checkpoint)
        mirror.close()
        said.extend(lines)

    sharded = publish(directory, "step-01", sharded=True)
    (sharded / "creds").symlink_to(tmp_path / "outside" / "credentials")
    mirrored(sharded)
    (directory / "step-02").symlink_to(tmp_path / "outside", target_is_directory=True)  # a link, newest by name
    mirrored(directory / "step-02")
    mirrored(publish(directory, "step-03"))
    assert remote.listed(uri, layout.OWN_PROGRAM) == {"step-01": True, "step-03": True}
    listing = json.loads(s3.client().get_object(
        Bucket=BUCKET, Key=f"run-links/step-01/{storage.COMPLETE_OBJECT}")["Body"].read())
    assert "creds" not in listing["files"] and len(listing["files"]) == 4
    assert any(line.startswith("checkpoint mirror: skipped creds: a symbolic link") for line in said), said
    assert any(line.startswith("checkpoint mirror: skipped step-02: a symbolic link") for line in said), said
    assert not any("mirror stopped" in line for line in said), said


def test_a_sharded_checkpoint_round_trips_file_by_file(s3, tmp_path):
    directory = tmp_path / "checkpoints"
    mirror, said = mirror_of("run-sharded", directory)
    mirror.offer(publish(directory, "ckpt-e0001-s000000.dcp"))
    mirror.close()
    uri = storage.parse(f"s3://{BUCKET}/run-sharded", "checkpoint")
    assert remote.newest_complete(uri, layout.EPOCH_STEP) == "ckpt-e0001-s000000.dcp"
    place = remote.download(uri, "ckpt-e0001-s000000.dcp", tmp_path / "new", Progress(tmp_path, "c", print))
    assert place.is_dir() and tree(place) == tree(directory / "ckpt-e0001-s000000.dcp")
    assert not list((tmp_path / "new").glob(".tmp-*"))


def test_close_uploads_the_newest_checkpoint_when_the_bucket_lacks_it(s3, tmp_path):
    """A process that restarts finds a checkpoint the previous one could not upload: close tries it again, and
    one already in the bucket is not uploaded twice."""
    directory = tmp_path / "checkpoints"
    publish(directory, "ckpt-e0004-s000000.pt")
    mirror, said = mirror_of("run-close", directory)
    mirror.close()
    assert remote.listed(storage.parse(f"s3://{BUCKET}/run-close", "checkpoint"), layout.EPOCH_STEP) == {
        "ckpt-e0004-s000000.pt": True}
    again, said = mirror_of("run-close", directory)
    again.close()
    assert said == ["checkpoint mirror: s3://team-ckpt/run-close/ckpt-e0004-s000000.pt already holds this 1 file: "
                    "nothing uploaded"]


def test_a_bucket_that_refuses_stops_the_mirror_with_one_line_and_training_goes_on(s3, tmp_path):
    directory = tmp_path / "checkpoints"
    said: list[str] = []
    mirror = CheckpointMirror(storage.parse("s3://no-such-bucket/x", "checkpoint"), directory, layout.EPOCH_STEP,
                              said.append)
    mirror.offer(publish(directory, "ckpt-e0001-s000000.pt"))
    mirror.close()
    assert len(said) == 1 and said[0].startswith("checkpoint mirror stopped: s3://no-such-bucket/x/ckpt-e0001-s000000.pt: "
                                                 "NoSuchBucket: no such bucket or object; check the URI")
    assert mirror.stopped is not None
    mirror.offer(publish(directory, "ckpt-e0002-s000000.pt"))  # ignored from now on: no thread, no line
    assert len(said) == 1


def cut_off_upload(client, uri, checkpoint: Path) -> None:
    """What an upload cut off leaves: the checkpoint's files, no listing."""
    for relative, path in remote.files_of(checkpoint).items():
        client.put_object(Bucket=uri.bucket, Key=f"{uri.below(checkpoint.name).prefix}/{relative}", Body=path.read_bytes())


def restore_environ(s3, volume: Path, prefix: str, **extra: str) -> dict[str, str]:
    return {**s3.environ, "OUTPUT_DIR": str(volume / "runs/job"),
            storage.URI_VARIABLES["checkpoint"]: f"s3://{BUCKET}/{prefix}", **extra}


def test_an_empty_volume_restores_the_newest_complete_checkpoint_while_index_1_waits(s3, tmp_path):
    written = tmp_path / "first-volume/runs/job/checkpoints"
    mirror, _ = mirror_of("run-restore", written)
    for epoch in (1, 2):
        mirror.offer(publish(written, f"ckpt-e{epoch:04d}-s000000.pt", size=3_000_000))
    mirror.close()
    uri = storage.parse(f"s3://{BUCKET}/run-restore", "checkpoint")
    cut_off_upload(s3.client(), uri, publish(tmp_path / "elsewhere", "ckpt-e0003-s000000.pt"))  # newer, never complete

    volume = tmp_path / "new-volume"
    environ = restore_environ(s3, volume, "run-restore")
    follower = stager(environ, index=1, wait=False)
    leader = stager(environ)
    assert leader.returncode == OK, leader.stdout + leader.stderr
    assert follower.wait(60) == OK
    restored = volume / "runs/job/checkpoints/ckpt-e0002-s000000.pt"
    assert restored.read_bytes() == (written / "ckpt-e0002-s000000.pt").read_bytes()
    assert [path.name for _, path in layout.list_checkpoints(restored.parent)] == ["ckpt-e0002-s000000.pt"]
    assert "stage: checkpoint ckpt-e0002-s000000.pt restored from s3://team-ckpt/run-restore into " in leader.stdout
    follower_said = follower.stdout.read()
    assert "index 0 decided: checkpoint ckpt-e0002-s000000.pt restored" in follower_said, follower_said

    again = stager(environ)  # the volume holds one now: the bucket is not read for it
    assert "stage: the volume holds ckpt-e0002-s000000.pt: nothing restored" in again.stdout
    fresh = stager(restore_environ(s3, tmp_path / "third-volume", "run-restore", RESUME="false"))
    assert "RESUME=false: no checkpoint restored" in fresh.stdout
    assert not (tmp_path / "third-volume/runs/job/checkpoints").exists()


def test_an_empty_bucket_starts_from_the_beginning_and_a_damaged_object_is_never_restored(s3, tmp_path):
    empty = stager(restore_environ(s3, tmp_path / "v1", "run-nothing-yet"))
    assert empty.returncode == OK
    assert "s3://team-ckpt/run-nothing-yet holds no complete checkpoint: training starts from the beginning" in empty.stdout

    written = tmp_path / "written"
    mirror, _ = mirror_of("run-damaged", written)
    mirror.offer(publish(written, "ckpt-e0001-s000000.pt"))
    mirror.close()
    key = "run-damaged/ckpt-e0001-s000000.pt/ckpt-e0001-s000000.pt"
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"garbage of another size")
    volume = tmp_path / "v2"
    follower = stager(restore_environ(s3, volume, "run-damaged"), index=1, wait=False)
    damaged = stager(restore_environ(s3, volume, "run-damaged", INDEXED_TRAINER_STAGING_ATTEMPTS="2"))
    assert damaged.returncode == DATA_UNAVAILABLE, damaged.stdout  # retried, then the pod restarts
    assert "arrived damaged" in damaged.stdout
    assert not layout.list_checkpoints(volume / "runs/job/checkpoints")  # nothing partial is ever visible
    assert follower.wait(60) == PEER_LOST  # the waiting index stops with index 0


def test_an_endpoint_that_is_not_s3_is_an_error_never_no_checkpoint(s3, tmp_path):
    """A proxy's sign-in page answering 200 for the bucket parsed as an empty listing: read as "no checkpoint",
    the run started over beside its bucket's checkpoints."""
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / BUCKET).write_bytes(b"<html><title>Sign in</title><body>Please sign in</body></html>")
    page = FileServer(tmp_path / "served")
    try:
        environ = restore_environ(s3, tmp_path / "volume", "run-proxied", AWS_ENDPOINT_URL=page.url,
                                  INDEXED_TRAINER_STAGING_ATTEMPTS="2")
        follower = stager(environ, index=1, wait=False)
        result = stager(environ)
    finally:
        page.close()
    assert result.returncode == DATA_UNAVAILABLE, result.stdout + result.stderr  # retried, then the pod restarts
    assert f"s3://team-ckpt/run-proxied: the endpoint ({page.url}) answered, but not as S3 does" in result.stdout
    assert "starts from the beginning" not in result.stdout and "Traceback" not in result.stdout + result.stderr
    assert follower.wait(60) == PEER_LOST


@pytest.mark.parametrize("listing", [b"<html>not json", b'{"files": []}', b'{"files": {"x": {"bytes": -1}}}', b"\xff" * 9])
def test_a_listing_that_is_not_ours_ends_index_0_in_one_line_and_the_others_stop(s3, tmp_path, listing):
    written = tmp_path / "written"
    prefix = f"run-listing-{abs(hash(listing))}"
    mirror, _ = mirror_of(prefix, written)
    mirror.offer(publish(written, "ckpt-e0001-s000000.pt"))
    mirror.close()
    s3.client().put_object(Bucket=BUCKET, Key=f"{prefix}/ckpt-e0001-s000000.pt/{storage.COMPLETE_OBJECT}", Body=listing)
    environ = restore_environ(s3, tmp_path / "volume", prefix)
    follower = stager(environ, index=1, wait=False)
    result = stager(environ)
    assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
    assert f"ckpt-e0001-s000000.pt/{storage.COMPLETE_OBJECT}: " in result.stdout
    assert "not an indexed-trainer listing" in result.stdout and "Traceback" not in result.stdout + result.stderr
    assert follower.wait(60) == PEER_LOST
    assert not layout.list_checkpoints(tmp_path / "volume/runs/job/checkpoints")


def test_with_a_signing_key_only_a_listing_signed_with_it_is_restored(s3, tmp_path, monkeypatch):
    """checkpoint.signing_secret: whoever may write the bucket but lacks the key cannot plant a checkpoint, swap one
    checkpoint's signed listing onto another, or have one signed with another key restored."""
    key = {storage.SIGNING_KEY_VARIABLE: "the run's key, from a Secret"}
    written = tmp_path / "written"
    monkeypatch.setenv(storage.SIGNING_KEY_VARIABLE, key[storage.SIGNING_KEY_VARIABLE])
    mirror, _ = mirror_of("run-signed", written)
    mirror.offer(publish(written, "ckpt-e0001-s000000.pt"))
    mirror.close()
    monkeypatch.delenv(storage.SIGNING_KEY_VARIABLE)
    client, uri = s3.client(), storage.parse(f"s3://{BUCKET}/run-signed", "checkpoint")
    signed = json.loads(client.get_object(Bucket=BUCKET, Key=f"run-signed/ckpt-e0001-s000000.pt/{storage.COMPLETE_OBJECT}")["Body"].read())
    assert len(signed["signature"]) == 64

    good = stager(restore_environ(s3, tmp_path / "v-good", "run-signed", **key))
    assert good.returncode == OK and "ckpt-e0001-s000000.pt restored" in good.stdout, good.stdout

    def planted(name: str, listing: dict) -> None:  # a newer checkpoint, written by someone without the key
        checkpoint = publish(tmp_path / "attacker", name)
        cut_off_upload(client, uri, checkpoint)
        client.put_object(Bucket=BUCKET, Key=f"run-signed/{name}/{storage.COMPLETE_OBJECT}", Body=json.dumps(listing))

    forged_files = {"ckpt-e0002-s000000.pt": {"bytes": 40_000, "md5": "0" * 32}}
    cases = {"unsigned": {"files": forged_files}, "another key": {"files": forged_files, "signature": "f" * 64},
             "replayed": signed}  # e0001's signed listing copied onto e0002's place
    for epoch, (case, listing) in enumerate(cases.items(), start=2):
        name = f"ckpt-e{epoch:04d}-s000000.pt"
        planted(name, {**listing, "files": {name: listing["files"].get(name) or next(iter(listing["files"].values()))}}
                if case != "replayed" else listing)
        volume = tmp_path / f"v-{epoch}"
        refused = stager(restore_environ(s3, volume, "run-signed", **key))
        assert refused.returncode == BAD_CONFIG, (case, refused.stdout)
        assert f"{name}: its listing is not signed with this run's key" in refused.stdout, (case, refused.stdout)
        assert not layout.list_checkpoints(volume / "runs/job/checkpoints"), case
        client.delete_object(Bucket=BUCKET, Key=f"run-signed/{name}/{storage.COMPLETE_OBJECT}")
    unchecked = stager(restore_environ(s3, tmp_path / "v-unkeyed", "run-signed"))  # without the key: as before
    assert unchecked.returncode == OK and "ckpt-e0001-s000000.pt restored" in unchecked.stdout


def test_a_bad_worker_variable_is_refused_before_anything_is_fetched(s3, tmp_path):
    result = stager(restore_environ(s3, tmp_path, "run-x", RESUME="maybe"))
    assert result.returncode == BAD_CONFIG and "RESUME" in result.stdout


def test_the_restore_marker_says_what_index_0_decided(s3, tmp_path):
    stager(restore_environ(s3, tmp_path, "run-never"))
    marker = json.loads((tmp_path / "runs/job" / storage.MARKER).read_text())
    assert marker["uri"] == "s3://team-ckpt/run-never" and "holds no complete checkpoint" in marker["outcome"]


def test_each_naming_lists_its_own_checkpoints_newest_first_by_their_numbers(tmp_path):
    for name in ("ckpt-e0002-s000000.pt", "step-00000009.ckpt", "step-100000000.ckpt", ".tmp-step-00000011.ckpt"):
        publish(tmp_path, name, size=8)
    publish(tmp_path, "step-00000010.ckpt", size=8, sharded=True)
    listed = [path.name for _, path in layout.list_checkpoints(tmp_path, layout.OPTIMIZER_STEP)]
    assert listed == ["step-100000000.ckpt", "step-00000010.ckpt", "step-00000009.ckpt"]
    assert [path.name for _, path in layout.list_checkpoints(tmp_path, layout.EPOCH_STEP)] == ["ckpt-e0002-s000000.pt"]
    layout.prune(tmp_path, 1, layout.OPTIMIZER_STEP)  # another program's checkpoint is none of its own
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith(".")) == [
        "ckpt-e0002-s000000.pt", "step-100000000.ckpt"]


def test_a_workloads_checkpoints_are_mirrored_and_restored_by_its_own_naming(s3, tmp_path):
    """worker.qa and worker.finetune name theirs step-XXXXXXXX.ckpt (under FSDP a directory): the stage command's
    --program (as a render writes it for them) restores the newest; the MNIST worker's restore sees none there."""
    written = tmp_path / "first-volume/runs/job/checkpoints"
    mirror, _ = mirror_of("run-qa", written, layout.OPTIMIZER_STEP)
    mirror.offer(publish(written, "step-00000005.ckpt"))
    newest = publish(written, "step-00000010.ckpt", sharded=True)
    layout.prune(written, 1, layout.OPTIMIZER_STEP)
    mirror.offer(newest)
    mirror.close()
    uri = storage.parse(f"s3://{BUCKET}/run-qa", "checkpoint")
    assert remote.listed(uri, layout.OPTIMIZER_STEP) == {"step-00000010.ckpt": True}

    volume = tmp_path / "new-volume"
    restored = stager(restore_environ(s3, volume, "run-qa"), args=["--program", "worker.qa"])
    assert restored.returncode == OK, restored.stdout + restored.stderr
    assert "stage: checkpoint step-00000010.ckpt restored from s3://team-ckpt/run-qa into " in restored.stdout
    assert tree(volume / "runs/job/checkpoints/step-00000010.ckpt") == tree(newest)
    mnist = stager(restore_environ(s3, tmp_path / "mnist-volume", "run-qa"))
    assert "s3://team-ckpt/run-qa holds no complete checkpoint" in mnist.stdout
    unknown = stager(restore_environ(s3, tmp_path / "v", "run-qa"), args=["--program", "team.train"])
    assert unknown.returncode == BAD_CONFIG and "invalid choice: 'team.train'" in unknown.stdout


# -- for the workloads' own runs with a bucket (tests/stager/test_programs_resume_from_the_bucket.py)
def rendered_stage_arguments(module: str, uri: str) -> list[str]:
    """What the stage init container runs after python -m worker.staging, as gen-manifests renders it for
    built-in program ``module`` with checkpoint.storage_uri ``uri``."""
    import yaml

    from tests.generator.helpers import run_main

    result = run_main("--set", f"entrypoint.module={module}", "--set", f"checkpoint.storage_uri={uri}",
                      "--set", "env_from_secrets=[s3-credentials]")
    assert result.exit_code == 0, result.stderr
    job = next(document for document in yaml.safe_load_all(result.stdout) if document["kind"] == "Job")
    command = next(container["command"] for container in job["spec"]["template"]["spec"]["initContainers"]
                   if container["name"] == "stage")
    assert command[:3] == ["python", "-m", "worker.staging"], command
    return command[3:]


def assert_the_bucket_holds_what_the_volume_holds(text: str, directory: Path, naming: layout.Naming,
                                                  scratch: Path) -> list[str]:
    """Every checkpoint of ``directory`` is complete in the bucket, byte for byte, and nothing else is; their
    names, newest first."""
    uri = storage.parse(text, "checkpoint")
    on_volume = [path for _, path in layout.list_checkpoints(directory, naming)]
    assert remote.listed(uri, naming) == {path.name: True for path in on_volume}
    for path in on_volume:
        copy = remote.download(uri, path.name, scratch / path.name, Progress(scratch, "checkpoint", print))
        assert tree(copy) == tree(path), path.name
    return [path.name for path in on_volume]


def restored_then_resumed(run, module: str, uri: str, environ: dict, settings: dict, volume: Path, step: int,
                          total: int, by_ranks: bool = False):
    """Another cluster, an empty ``volume``: the stage step, as gen-manifests renders it for built-in program
    ``module``, restores the bucket's checkpoint of ``step`` (``by_ranks``: a sharded one, left to the program's
    ranks, each of which fetches a share as it starts), then ``run(volume, settings)`` (the workload under the
    launcher) resumes from it and trains to step ``total``; its result."""
    name = layout.step_checkpoint_name(step)
    staged = stager({**environ, "OUTPUT_DIR": str(volume), **settings}, args=rendered_stage_arguments(module, uri))
    assert staged.returncode == OK, staged.stdout + staged.stderr
    restored = f"checkpoint {name} restored from {uri} into "
    assert (f"stage: checkpoint {name} of {uri} is sharded (" if by_ranks else f"stage: {restored}") in staged.stdout
    resumed = run(volume, settings)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    if by_ranks:
        assert re.search(rf"Rank 0: {re.escape(restored)}\S+ by 2 ranks at once", resumed.stdout), resumed.stdout[-3000:]
    assert f"Rank 0: resuming from {name}" in resumed.stdout
    assert f"Rank 0: training from step {step} of {total}" in resumed.stdout
    return resumed


def killed_then_resumed_from_the_bucket(run, module: str, uri: str, environ: dict, tmp_path: Path, *, whole: dict,
                                        fault_at: str, mirrored: int, total: int, by_ranks: bool = False) -> Path:
    """The bucket round trip of built-in program ``module`` (``run(volume, settings)`` under the launcher): first a
    run never killed, with ``whole``'s settings, into tmp_path/whole; then, mirroring to ``uri``, rank 0 stalls
    before batch ``fault_at`` (epoch.batch), while the mirror uploads step ``mirrored``, then dies; on another, empty
    volume the stage step restores that step and the run trains to ``total``. The bucket holds what each volume
    holds at each end (``by_ranks``: every rank uploads its shards, and fetches a share of them back). The second
    volume, for the caller's comparison with tmp_path/whole."""
    # the newest checkpoint only is kept: the mirror uploads the newest offered and skips an older one still
    # waiting, so with more the bucket could lack one the volume has
    settings = {**whole, "KEEP_CHECKPOINTS": "1", storage.URI_VARIABLES["checkpoint"]: uri}
    uninterrupted = run(tmp_path / "whole", whole)
    assert uninterrupted.returncode == 0, uninterrupted.stdout[-3000:]
    first, second = tmp_path / "first-volume", tmp_path / "second-volume"
    killed = run(first, {**settings, **fault_env(f"sleep=2@batch={fault_at},rank=0; sigkill@batch={fault_at},rank=0")})
    assert killed.returncode != 0
    uploaded = (f"Rank 0: checkpoint mirror: {layout.step_checkpoint_name(mirrored)} uploaded to {uri}/"
                if by_ranks else "Rank 0: checkpoint mirror: uploaded ")
    assert uploaded in killed.stdout, killed.stdout[-3000:]
    assert assert_the_bucket_holds_what_the_volume_holds(uri, first / "checkpoints", layout.OPTIMIZER_STEP,
                                                         tmp_path / "scratch-1") == [layout.step_checkpoint_name(mirrored)]
    restored_then_resumed(run, module, uri, environ, settings, second, step=mirrored, total=total, by_ranks=by_ranks)
    # the process ends with the newest checkpoint in the bucket, and what the volume pruned gone from it
    assert assert_the_bucket_holds_what_the_volume_holds(uri, second / "checkpoints", layout.OPTIMIZER_STEP,
                                                         tmp_path / "scratch-2") == [layout.step_checkpoint_name(total)]
    return second
