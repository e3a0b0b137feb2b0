"""The stager (python -m worker.staging) against real servers on 127.0.0.1: a Hub for huggingface_hub, moto's
S3, a plain file server; as index 0 (fetches, verifies, renames into place, marks) and as an index that waits.
Every fault of the issue: not found / 401 / 403 refused with one line, 5xx retried then the retryable exit,
a volume too small, index 0 killed mid-download, offline."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path
from urllib.parse import unquote

import pytest

from testbed.http_mirror import Mirror
from testbed.storage_servers import FileServer, HubServer, S3Server
from tests.conftest import BIN, OUTSIDE
from trainer_contract import storage
from trainer_contract.exit_codes import BAD_CONFIG, DATA_UNAVAILABLE, PEER_LOST
from trainer_contract.storage import STAGE_JOB_VARIABLE

TINY_MODEL = {"config.json": b'{"model_type": "bert", "hidden_size": 32}\n', "vocab.txt": b"[PAD]\n[UNK]\nhello\n",
              "model.safetensors": os.urandom(300_000)}


def stager(environ: dict[str, str], *, index: int = 0, wait: bool = True, timeout: float = 120, args=()):
    """Run python -m worker.staging ``args`` as index ``index`` with ``environ`` (and nothing of the test's own)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(OUTSIDE), "JOB_COMPLETION_INDEX": str(index),
           "INDEXED_TRAINER_STAGING_RETRY_SECONDS": "0.2", "HF_HUB_DISABLE_TELEMETRY": "1", **environ}
    command = [str(BIN / "python"), "-m", "worker.staging", *args]
    if not wait:
        return subprocess.Popen(command, env=env, cwd=OUTSIDE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    return subprocess.run(command, env=env, cwd=OUTSIDE, capture_output=True, text=True, timeout=timeout)


def sources(role: str, text: str, volume: Path) -> dict[str, str]:
    uri = storage.parse(text, role)
    return {storage.URI_VARIABLES[role]: text,
            storage.STAGED[role].path: uri.staged_path(str(volume), role)}


@pytest.fixture
def hub():
    server = HubServer()
    yield server
    server.close()


@pytest.fixture
def files(tmp_path):
    (tmp_path / "served").mkdir()
    server = FileServer(tmp_path / "served")
    yield server
    server.close()


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    yield server
    server.close()


def test_a_hub_model_is_staged_once_verified_and_a_rerun_fetches_nothing(hub, tmp_path):
    commit = hub.add("org/tiny-bert", TINY_MODEL)
    environ = {**sources("model", "hf://org/tiny-bert", tmp_path), "HF_ENDPOINT": hub.url}
    first = stager(environ)
    assert first.returncode == 0, first.stdout + first.stderr
    place = tmp_path / "staged/models/hf/org--tiny-bert/main"
    assert {path.name for path in place.iterdir()} == {*TINY_MODEL, storage.MARKER}
    assert (place / "model.safetensors").read_bytes() == TINY_MODEL["model.safetensors"]
    marker = json.loads((place / storage.MARKER).read_text())
    assert marker["commit"] == commit and marker["files"]["model.safetensors"]["bytes"] == 300_000
    assert sorted(hub.fetched()) == sorted(f"/org/tiny-bert/resolve/{commit}/{name}" for name in TINY_MODEL)
    assert not list(place.parent.glob(".tmp-*"))  # nothing left beside it

    served = len(hub.log)
    again = stager({**environ, "HF_HUB_OFFLINE": "1"})
    assert again.returncode == 0 and "already staged" in again.stdout and "nothing fetched" in again.stdout
    assert len(hub.log) == served  # not even a HEAD


def test_a_new_revision_is_staged_beside_the_old_one(hub, tmp_path):
    hub.add("org/tiny-bert", TINY_MODEL, revision="v1")
    hub.add("org/tiny-bert", {**TINY_MODEL, "config.json": b'{"hidden_size": 64}\n'}, revision="v2")
    for revision in ("v1", "v2"):
        result = stager({**sources("model", f"hf://org/tiny-bert@{revision}", tmp_path), "HF_ENDPOINT": hub.url})
        assert result.returncode == 0, result.stdout
    staged = tmp_path / "staged/models/hf/org--tiny-bert"
    assert sorted(path.name for path in staged.iterdir() if not path.name.startswith(".")) == ["v1", "v2"]
    assert b"64" in (staged / "v2/config.json").read_bytes() and b"32" in (staged / "v1/config.json").read_bytes()


def test_a_hub_dataset_is_staged_and_the_other_index_waits_for_it_saying_what_for(hub, tmp_path):
    hub.add("org/squad-tiny", {"train.json": b'{"data": []}\n' * 2000}, repo_type="dataset")
    hub.faults.slow_bytes_per_second = 8_000  # a few seconds of transfer, so that index 1 waits
    environ = {**sources("dataset", "hf://datasets/org/squad-tiny", tmp_path), "HF_ENDPOINT": hub.url}
    follower = stager(environ, index=1, wait=False)
    leader = stager(environ)
    output, _ = follower.communicate(timeout=120)
    assert leader.returncode == 0, leader.stdout
    assert follower.returncode == 0, output
    assert "waiting for index 0 to stage dataset org/squad-tiny@main" in output
    assert "staged at" in output and "by index 0" in output
    assert len(hub.fetched("/train.json")) == 1  # fetched once, by index 0


def test_with_a_stage_job_of_its_own_every_index_waits_for_it_and_index_0_fetches_nothing(hub, tmp_path):
    """initializer.separate_job: the training pods' stage step (STAGE_JOB_VARIABLE names the stage Job) waits for
    what that Job's pod stages, index 0 as the others, and says so by the Job's name."""
    hub.add("org/squad-tiny", {"train.json": b'{"data": []}\n' * 2000}, repo_type="dataset")
    hub.faults.slow_bytes_per_second = 8_000  # a few seconds of transfer, so that index 0 of the training waits
    environ = {**sources("dataset", "hf://datasets/org/squad-tiny", tmp_path), "HF_ENDPOINT": hub.url}
    training = stager({**environ, STAGE_JOB_VARIABLE: "squad-stage"}, index=0, wait=False)
    stage_job = stager(environ)  # its one pod: index 0 of the stage Job
    output, _ = training.communicate(timeout=120)
    assert stage_job.returncode == 0, stage_job.stdout
    assert training.returncode == 0, output
    assert "waiting for Job squad-stage to stage dataset org/squad-tiny@main" in output
    assert "by Job squad-stage (" in output and "index 0" not in output
    assert len(hub.fetched("/train.json")) == 1  # fetched once, by the stage Job


@pytest.mark.parametrize(("fault", "uri", "words"), [
    ({}, "hf://org/missing", "not found, or private"),
    ({"status": 404, "count": 100}, "hf://org/tiny-bert", "not found, or private"),
    ({"token": "hf_secret"}, "hf://org/tiny-bert", ": 401"),
    ({}, "hf://org/tiny-bert@v9", "no revision 'v9'"),
])
def test_what_the_hub_refuses_ends_at_once_with_one_line_naming_the_uri(hub, tmp_path, fault, uri, words):
    hub.add("org/tiny-bert", TINY_MODEL)
    for key, value in fault.items():
        setattr(hub.faults, key, value)
    result = stager({**sources("model", uri, tmp_path), "HF_ENDPOINT": hub.url})
    assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if line.startswith("stage: error:")]
    assert len(errors) == 1 and uri in errors[0] and words in errors[0], result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "staged/models/hf").exists() or not any((tmp_path / "staged/models/hf").rglob("config.json"))


def test_the_waiting_index_stops_as_a_victim_when_index_0_fails(hub, tmp_path):
    """A Slurm step's other tasks keep running when one fails: the waiters must end too, as victims (75, not
    counted), while index 0's own code says why."""
    environ = {**sources("model", "hf://org/missing", tmp_path), "HF_ENDPOINT": hub.url}
    follower = stager(environ, index=1, wait=False)
    time.sleep(1.0)  # waiting before index 0 starts
    leader = stager(environ)
    output, _ = follower.communicate(timeout=60)
    assert leader.returncode == BAD_CONFIG
    assert follower.returncode == PEER_LOST, output
    assert "index 0 failed to stage: hf://org/missing" in output


def test_a_private_repository_is_staged_with_the_token_from_the_environment(hub, tmp_path):
    hub.add("org/private-bert", TINY_MODEL)
    hub.faults.token = "hf_secret"
    result = stager({**sources("model", "hf://org/private-bert", tmp_path), "HF_ENDPOINT": hub.url,
                     "HF_TOKEN": "hf_secret"})
    assert result.returncode == 0, result.stdout
    assert "hf_secret" not in result.stdout + result.stderr


def test_server_errors_are_retried_with_back_off_then_the_retryable_exit(hub, tmp_path):
    hub.add("org/tiny-bert", TINY_MODEL)
    environ = {**sources("model", "hf://org/tiny-bert", tmp_path), "HF_ENDPOINT": hub.url,
               "INDEXED_TRAINER_STAGING_ATTEMPTS": "3"}
    hub.faults.status, hub.faults.count = 503, 2  # fewer than the attempts (huggingface_hub retries too)
    recovered = stager(environ)
    assert recovered.returncode == 0, recovered.stdout
    hub.faults.status, hub.faults.count = 500, 10_000
    given_up = stager({**sources("model", "hf://org/tiny-bert@other", tmp_path), "HF_ENDPOINT": hub.url,
                       "INDEXED_TRAINER_STAGING_ATTEMPTS": "2"})
    assert given_up.returncode == DATA_UNAVAILABLE, given_up.stdout
    assert "retrying in" in given_up.stdout and given_up.stdout.count("stage: error:") == 1


def _tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_marker_of_another_source_in_the_place_is_refused_not_taken_for_it(hub, tmp_path):
    """What an earlier version (its staged paths were not injective: @v1/x and @v1_x shared one) or a person left
    in this source's place: refused, never trained on."""
    hub.add("org/tiny-bert", TINY_MODEL, revision="v1")
    environ = {**sources("model", "hf://org/tiny-bert@v1", tmp_path), "HF_ENDPOINT": hub.url}
    place = Path(environ["MODEL_DIR"])
    place.mkdir(parents=True)
    (place / storage.MARKER).write_text(json.dumps({"uri": "hf://org/tiny-bert@v1_x?token=tok-5", "staged_at": "x"}))
    result = stager(environ)
    assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
    assert "holds 'hf://org/tiny-bert@v1_x?token=***', another source" in result.stdout
    assert "tok-5" not in result.stdout + result.stderr and "Traceback" not in result.stdout + result.stderr
    assert not hub.fetched()


# What a Llama-style repository holds beside what from_pretrained loads: consolidated originals, pickled weights
EXTRA_FILES = {"original/consolidated.00.pth": os.urandom(200_000), "original/params.json": b"{}",
               "pytorch_model.bin": os.urandom(100_000), "README.md": b"# tiny\n"}


def test_a_hub_model_stages_what_from_pretrained_loads_unless_its_patterns_say_otherwise(hub, tmp_path):
    commit = hub.add("org/llama-like", {**TINY_MODEL, **EXTRA_FILES})
    environ = {**sources("model", "hf://org/llama-like", tmp_path / "default"), "HF_ENDPOINT": hub.url}
    result = stager(environ)
    assert result.returncode == 0, result.stdout + result.stderr
    place = Path(environ["MODEL_DIR"])
    assert sorted(str(path.relative_to(place)) for path in place.rglob("*") if path.is_file()) == \
        sorted([*TINY_MODEL, "original/params.json", storage.MARKER])  # *.json: the small params.json too
    assert "3 files of the repository (300007 bytes) left out by the patterns" in result.stdout
    assert sorted(hub.fetched()) == sorted(f"/org/llama-like/resolve/{commit}/{name}"
                                           for name in [*TINY_MODEL, "original/params.json"])
    assert json.loads((place / storage.MARKER).read_text())["patterns"] == {"allow": list(storage.MODEL_FILES),
                                                                           "ignore": None}
    # everything but the originals, as a user's own program may want
    chosen = {**sources("model", "hf://org/llama-like", tmp_path / "chosen"), "HF_ENDPOINT": hub.url,
              storage.STAGED["model"].allow_patterns: '["*"]', storage.STAGED["model"].ignore_patterns:
              '["original/"]'}
    assert stager(chosen).returncode == 0
    place = Path(chosen["MODEL_DIR"])
    assert sorted(path.name for path in place.iterdir()) == sorted([*TINY_MODEL, "pytorch_model.bin", "README.md",
                                                                    storage.MARKER])
    # other patterns for a place already staged: refused, naming how to stage it again (never a partial set)
    again = stager({**chosen, storage.STAGED["model"].ignore_patterns: '[]'})
    assert again.returncode == BAD_CONFIG and "was staged with other patterns" in again.stdout, again.stdout


@pytest.mark.parametrize("setting, words", [
    ('{"*.json": 1}', "write a JSON list of glob patterns"),
    ('["*.nothing"]', "none of its 7 files matches the patterns"),
])
def test_malformed_or_empty_patterns_are_refused_with_one_line(hub, tmp_path, setting, words):
    hub.add("org/llama-like", {**TINY_MODEL, **EXTRA_FILES})
    environ = {**sources("model", "hf://org/llama-like", tmp_path), "HF_ENDPOINT": hub.url,
               storage.STAGED["model"].allow_patterns: setting}
    result = stager(environ)
    assert result.returncode == BAD_CONFIG and words in result.stdout, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr and not hub.fetched()
    assert not Path(environ["MODEL_DIR"]).exists()


def test_a_hub_listing_a_file_outside_the_directory_is_refused_before_any_download(hub, tmp_path):
    hub.add("org/evil", {"config.json": b"{}", "../../escaped.txt": b"planted"})
    environ = {**sources("model", "hf://org/evil", tmp_path / "volume"), "HF_ENDPOINT": hub.url}
    result = stager(environ)
    assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
    assert "the Hub lists a file named '../../escaped.txt', which would land outside the directory" in result.stdout
    assert not hub.fetched() and not list(tmp_path.rglob("escaped.txt"))


def test_a_presigned_urls_signature_stays_out_of_every_line_and_the_marker(files, tmp_path):
    (files.root / "data.tar.gz").write_bytes(_tarball({"d/train.json": b"{}"}))
    environ = sources("dataset", f"{files.url}/data.tar.gz?X-Amz-Signature=sig-0123456789", tmp_path / "volume")
    first, again = stager(environ), stager(environ)
    assert first.returncode == 0 and again.returncode == 0, first.stdout + first.stderr
    assert "already staged" in again.stdout
    place = Path(environ["DATASET_DIR"])
    assert (place / "d/train.json").read_bytes() == b"{}"
    for text in (first.stdout, first.stderr, again.stdout, (place / storage.MARKER).read_text()):
        assert "sig-0123456789" not in text
    missing = stager(sources("dataset", f"{files.url}/gone.tar.gz?X-Amz-Signature=sig-0123456789", tmp_path / "v"))
    assert missing.returncode == BAD_CONFIG and "X-Amz-Signature=***" in missing.stdout
    assert "sig-0123456789" not in missing.stdout + missing.stderr


def test_a_uri_from_a_secret_is_staged_at_the_secrets_place_and_a_new_signature_is_the_same_source(files,
                                                                                                   tmp_path):
    """initializer.dataset.storage_uri_secret: the render knows the Secret's key only (DATASET_DIR is its place);
    the stager reads the presigned URL from its environment. Presigned again (a new signature), it is the same
    source; another URL in the Secret is another source, refused in that place."""
    (files.root / "data.tar.gz").write_bytes(_tarball({"d/train.json": b"{}"}))
    files.required_query = ("X-Amz-Signature", "sig-first-0123")
    place = Path(storage.from_secret("presigned", "url").staged_path(str(tmp_path / "volume"), "dataset"))
    assert place == tmp_path / "volume/staged/datasets/secret/presigned/url"
    environ = {"DATASET_DIR": str(place),
               "INDEXED_TRAINER_DATASET_URI": f"{files.url}/data.tar.gz?X-Amz-Signature=sig-first-0123"}
    first = stager(environ)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (place / "d/train.json").read_bytes() == b"{}"
    assert json.loads((place / storage.MARKER).read_text())["uri"] == f"{files.url}/data.tar.gz?X-Amz-Signature=***"
    files.required_query = ("X-Amz-Signature", "sig-second-4567")
    again = stager({**environ, "INDEXED_TRAINER_DATASET_URI": f"{files.url}/data.tar.gz?X-Amz-Signature=sig-second-4567"})
    assert again.returncode == 0 and "already staged" in again.stdout, again.stdout + again.stderr
    other = stager({**environ, "INDEXED_TRAINER_DATASET_URI": f"{files.url}/other.tar.gz?X-Amz-Signature=sig-second-4567"})
    assert other.returncode == BAD_CONFIG and "another source" in other.stdout, other.stdout + other.stderr
    assert files.fetched() == ["/data.tar.gz"]
    for result in (first, again, other):
        assert "sig-first" not in result.stdout + result.stderr and "sig-second" not in result.stdout + result.stderr
    # a path needs no Secret, and a path given through one would be read from the Secret's place
    path = stager({"DATASET_DIR": str(place), "INDEXED_TRAINER_DATASET_URI": str(tmp_path / "volume/data")})
    assert path.returncode == BAD_CONFIG and "give the path as storage_uri itself" in path.stdout, path.stdout


def test_an_https_archive_is_unpacked_and_staged_once(files, tmp_path):
    (files.root / "squad.tar.gz").write_bytes(_tarball({"squad/train.json": b"{}", "squad/dev.json": b"[]"}))
    environ = sources("dataset", f"{files.url}/squad.tar.gz", tmp_path / "volume")
    assert stager(environ).returncode == 0
    assert stager(environ).returncode == 0
    place = Path(environ["DATASET_DIR"])
    assert (place / "squad/train.json").read_bytes() == b"{}" and not (place / "squad.tar.gz").exists()
    assert files.fetched() == ["/squad.tar.gz"]


def _zip_of_zeros(size: int) -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("zeros.bin", bytes(size))
    return buffer.getvalue()


@pytest.mark.parametrize("archive", ["bomb.tar.gz", "bomb.zip"])
def test_an_archive_that_unpacks_past_its_limit_is_refused_before_anything_is_unpacked(files, tmp_path, archive):
    """Under 1 MB that unpacks to 60 MB: the members' declared sizes are checked first."""
    data = _zip_of_zeros(60_000_000) if archive.endswith(".zip") else _tarball({"zeros.bin": bytes(60_000_000)})
    assert len(data) < 1_000_000
    (files.root / archive).write_bytes(data)
    environ = {**sources("dataset", f"{files.url}/{archive}", tmp_path / "volume"),
               storage.STAGED["dataset"].unpack_limit: "10000000"}
    result = stager(environ)
    assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
    assert f"{archive}: the archive unpacks to 60 MB, over the limit of 10 MB set for it" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert not Path(environ["DATASET_DIR"]).exists()
    assert sum(path.stat().st_size for path in (tmp_path / "volume").rglob("*") if path.is_file()) < 1_000_000
    bad = stager({**environ, storage.STAGED["dataset"].unpack_limit: "ten"})
    assert bad.returncode == BAD_CONFIG and "INDEXED_TRAINER_DATASET_MAX_BYTES='ten': write a positive number" in bad.stdout
    unbounded = stager({key: value for key, value in environ.items() if key not in {staged.unpack_limit for staged in storage.STAGED.values()}})
    assert unbounded.returncode == 0 and (Path(environ["DATASET_DIR"]) / "zeros.bin").stat().st_size == 60_000_000


@contextlib.contextmanager
def small_volume(path: Path, options: str = "size=4m"):
    """A tmpfs of ``options`` at ``path`` (a shared volume that fills up), unmounted after; skipped without mount."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"a small volume needs mount (root): {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_an_archive_larger_than_the_volumes_free_space_is_refused_before_unpacking(files, tmp_path):
    with small_volume(tmp_path / "small-volume") as volume:
        (files.root / "bomb.zip").write_bytes(_zip_of_zeros(20_000_000))
        environ = sources("dataset", f"{files.url}/bomb.zip", volume)
        result = stager(environ)
        assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
        assert "the shared volume has 4 MB free" in result.stdout and "the source needs 20 MB" in result.stdout
        assert "Traceback" not in result.stdout + result.stderr and not Path(environ["DATASET_DIR"]).exists()


def test_an_answer_without_size_or_end_stops_before_the_volume_is_full(tmp_path):
    """A server that sends zeros without a Content-Length, onto a 4 MB volume: the stager stops with a twentieth of
    the volume still free, names the server's answer (not the volume) in one line, and leaves nothing behind."""
    with small_volume(tmp_path / "small-volume") as volume:
        (tmp_path / "served").mkdir()
        with Mirror(tmp_path / "served", endless={"train.jsonl"}) as mirror:
            environ = sources("dataset", f"{mirror.url}train.jsonl", volume)
            result = stager(environ)
            assert mirror.requests["train.jsonl"] == 1, "refused, not retried"
        assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
        assert "train.jsonl: the server sent over 4 MB without announcing a size, more than the shared volume has to " \
               "spare" in result.stdout
        assert "Traceback" not in result.stdout + result.stderr and not Path(environ["DATASET_DIR"]).exists()
        # what it fetched is gone: only the small notes for the waiting indexes (progress, failure) are left
        assert sum(path.stat().st_size for path in volume.rglob("*") if path.is_file()) < 10_000


@pytest.mark.parametrize("listed, words", [
    (True, "more of model.safetensors than the 300000 bytes it lists"),
    (False, "of model.safetensors, which it lists without a size, more than the shared volume has to spare")])
def test_a_hub_file_sent_without_end_stops_at_its_listed_size_not_at_a_full_volume(hub, tmp_path, listed, words):
    """A Hub (HF_ENDPOINT) that sends a file without end, onto a 4 MB volume: huggingface_hub's client checks a
    file's size only once the answer ends, so the stager stops the transfer at the size the Hub lists (or, listed
    without one, with a twentieth of the volume free), names the file in one line, does not retry, and leaves the
    volume as it was."""
    with small_volume(tmp_path / "small-volume") as volume:
        commit = hub.add("org/tiny", TINY_MODEL)
        hub.endless = {"model.safetensors"}
        hub.unsized = set() if listed else {"model.safetensors"}
        environ = {**sources("model", "hf://org/tiny", volume), "HF_ENDPOINT": hub.url}
        result = stager(environ)
        assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
        assert "hf://org/tiny: the Hub sent " in result.stdout and words in result.stdout, result.stdout
        assert hub.fetched("model.safetensors") == [f"/org/tiny/resolve/{commit}/model.safetensors"], "not retried"
        assert "Traceback" not in result.stdout + result.stderr and not Path(environ["MODEL_DIR"]).exists()
        assert sum(path.stat().st_size for path in volume.rglob("*") if path.is_file()) < 10_000


def test_a_volume_that_fills_up_while_unpacking_ends_in_one_line_and_nothing_partial(files, tmp_path):
    """The declared sizes fit (2 KB), the volume does not: a tmpfs of 64 inodes, 300 one-byte members. What a
    volume filled by another writer while unpacking does: ENOSPC mid-unpack, one line and 78, no traceback,
    nothing visible in the place and no temporary left behind."""
    with small_volume(tmp_path / "few-inodes", "size=4m,nr_inodes=64") as volume:
        (files.root / "many.tar.gz").write_bytes(_tarball({f"d/{index:04d}.txt": b"x" for index in range(300)}))
        environ = sources("dataset", f"{files.url}/many.tar.gz", volume)
        result = stager(environ)
        assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
        assert "No space left on device" in result.stdout and "raise shared_volume.size or free space there" \
            in result.stdout, result.stdout
        assert "Traceback" not in result.stdout + result.stderr and not Path(environ["DATASET_DIR"]).exists()
        leftovers = [path for path in volume.rglob("*") if path.is_file() and not path.name.startswith(".")]
        assert leftovers == [], leftovers[:5]


def test_an_archive_member_that_would_escape_is_refused(files, tmp_path):
    (files.root / "evil.tar.gz").write_bytes(_tarball({"../../escaped.txt": b"x"}))
    result = stager(sources("dataset", f"{files.url}/evil.tar.gz", tmp_path / "volume"))
    assert result.returncode == BAD_CONFIG and "cannot unpack" in result.stdout
    assert not list(tmp_path.rglob("escaped.txt"))


@pytest.mark.parametrize(("status", "code", "words"), [(404, BAD_CONFIG, "no such file"),
                                                       (403, BAD_CONFIG, "refuses this download"),
                                                       (502, DATA_UNAVAILABLE, "502")])
def test_an_https_failure_says_what_happened(files, tmp_path, status, code, words):
    (files.root / "data.json").write_bytes(b"{}")
    files.faults.status, files.faults.count = status, 100
    result = stager({**sources("dataset", f"{files.url}/data.json", tmp_path), "INDEXED_TRAINER_STAGING_ATTEMPTS": "2"})
    assert result.returncode == code and words in result.stdout, result.stdout


def test_a_volume_too_small_is_refused_before_the_download(files, tmp_path):
    (files.root / "huge.bin").write_bytes(b"x")
    files.announce = 10**17  # 100 PB: no volume here has that much room
    result = stager(sources("model", f"{files.url}/huge.bin", tmp_path))
    assert result.returncode == BAD_CONFIG
    assert "raise shared_volume.size" in result.stdout and "MB free" in result.stdout


def test_two_jobs_staging_one_source_at_once_take_turns_and_fetch_it_once(files, tmp_path):
    """Two Jobs on one volume, each an index 0: they shared one temporary directory, each emptying the other's."""
    payload = os.urandom(24_000)
    (files.root / "weights.bin").write_bytes(payload)
    files.faults.slow_bytes_per_second = 8_000  # three seconds of transfer: the second starts during the first's
    environ = sources("model", f"{files.url}/weights.bin", tmp_path)
    first = stager(environ, wait=False)
    deadline = time.monotonic() + 30
    while not files.fetched() and time.monotonic() < deadline:
        time.sleep(0.1)
    second = stager(environ, wait=False)
    outputs = [process.communicate(timeout=60)[0] for process in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    assert "another staging of model " in outputs[1] and "already staged" in outputs[1], outputs[1]
    assert (Path(environ["MODEL_DIR"]) / "weights.bin").read_bytes() == payload
    assert files.fetched() == ["/weights.bin"]


def test_index_0_killed_mid_download_leaves_nothing_visible_and_its_restart_completes(files, tmp_path):
    payload = os.urandom(64_000)
    (files.root / "weights.bin").write_bytes(payload)
    files.faults.slow_bytes_per_second = 8_000
    environ = sources("model", f"{files.url}/weights.bin", tmp_path)
    place = Path(environ["MODEL_DIR"])
    leader = stager(environ, wait=False)
    deadline = time.monotonic() + 30
    while not list(place.parent.glob(".tmp-*/weights.bin")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)
    leader.send_signal(signal.SIGKILL)
    leader.wait(timeout=30)
    assert not place.exists()  # only the temporary directory, which nothing reads
    files.faults.slow_bytes_per_second = 0
    restarted = stager(environ)
    assert restarted.returncode == 0, restarted.stdout
    assert (place / "weights.bin").read_bytes() == payload and not list(place.parent.glob(".tmp-*"))


def test_a_bucket_prefix_is_staged_verified_and_a_rerun_needs_no_bucket(s3, tmp_path):
    client = s3.client()
    client.create_bucket(Bucket="team-data")
    objects = {"mnist/MNIST/raw/a.gz": os.urandom(2000), "mnist/MNIST/raw/b.gz": b"bb", "other/c": b"c"}
    for key, data in objects.items():
        client.put_object(Bucket="team-data", Key=key, Body=data)
    environ = {**sources("dataset", "s3://team-data/mnist", tmp_path), **s3.environ}
    result = stager(environ)
    assert result.returncode == 0, result.stdout + result.stderr
    place = Path(environ["DATASET_DIR"])
    assert (place / "MNIST/raw/a.gz").read_bytes() == objects["mnist/MNIST/raw/a.gz"]
    assert not (place / "c").exists() and not (place / "other").exists()
    # each object's SHA-256 beside its ETag: the workload knows the file without reading it again
    marker = json.loads((place / storage.MARKER).read_text())
    assert marker["files"]["MNIST/raw/a.gz"]["sha256"] == hashlib.sha256(objects["mnist/MNIST/raw/a.gz"]).hexdigest()
    gone = stager({**environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})  # nothing answers there
    assert gone.returncode == 0 and "nothing fetched" in gone.stdout


def test_a_missing_bucket_or_an_empty_prefix_is_refused_naming_the_uri(s3, tmp_path):
    for uri in ("s3://no-such-bucket/x", "s3://team-data/nothing-here"):
        s3.client().create_bucket(Bucket="team-data")
        result = stager({**sources("model", uri, tmp_path), **s3.environ})
        assert result.returncode == BAD_CONFIG and f"stage: error: {uri}" in result.stdout, result.stdout


def test_offline_with_nothing_staged_says_how_to_stage(hub, tmp_path):
    hub.add("org/tiny-bert", TINY_MODEL)
    result = stager({**sources("model", "hf://org/tiny-bert", tmp_path), "HF_ENDPOINT": hub.url,
                     "HF_HUB_OFFLINE": "1"})
    assert result.returncode == BAD_CONFIG and "HF_HUB_OFFLINE" in result.stdout, result.stdout
    assert hub.log == []


@pytest.mark.parametrize(("endpoint", "expected"), [
    ("https://minio.team.example:9000", "https://minio.team.example:9000/team-data/reviews/train.csv"),
    (None, "https://team-data.s3.amazonaws.com/reviews/train.csv"),
])
def test_another_s3_is_addressed_by_path_and_aws_by_its_own_default(monkeypatch, endpoint, expected):
    """MinIO, Ceph and the like answer at their own host name, which rarely resolves with the bucket in front
    (team-data.minio.team.example): with AWS_ENDPOINT_URL set, botocore's default puts the bucket in the path (what
    docs/guides.md tells MinIO users); this keeps it so if a release changes that default."""
    from trainer_stager import fetch_s3

    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(key, raising=False)
    if endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    url = fetch_s3.client().generate_presigned_url("get_object", Params={"Bucket": "team-data",
                                                                         "Key": "reviews/train.csv"})
    assert url.split("?")[0] == expected


@pytest.mark.parametrize("text", ["HTTPS://files.example/data.tar.gz?X-Amz-Signature=sig-0123456789",
                                  "https:/files.example/data.tar.gz?X-Amz-Signature=sig-0123456789",
                                  "https://[files.example/data.tar.gz?sig=sig-0123456789",
                                  "s3://Bucket/data?X-Amz-Signature=sig-0123456789"])
def test_a_uri_from_a_secret_that_does_not_parse_is_named_by_its_secret_never_by_its_text(tmp_path, text):
    """A presigned URL mistyped into the Secret: the stager's one line (also its termination message, which anyone
    who can get pods reads) names the Secret and key the render gave it, and shows nothing of the URL."""
    place = storage.from_secret("presigned", "url").staged_path(str(tmp_path / "volume"), "dataset")
    result = stager({"DATASET_DIR": place, "INDEXED_TRAINER_DATASET_URI": text,
                     storage.URI_SOURCE_VARIABLES["dataset"]: "from Secret presigned key url"})
    assert result.returncode == BAD_CONFIG, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "from Secret presigned key url" in output
    assert "sig-0123456789" not in output and "files.example" not in output and "Traceback" not in output


SIGNATURE = "Sig0123456789abcdefSECRET"
# The stager run as the kubelet runs it, its termination message written to a file the test reads (the kubelet's
# /dev/termination-log is the default of write_termination_message's path).
WITH_TERMINATION_LOG = ("import sys; from pathlib import Path; from trainer_contract import launcher; "
                        "launcher.write_termination_message.__defaults__ = (Path(sys.argv[1]),); "
                        "from trainer_stager.cli import main; sys.exit(main(argv=[]))")


def refused_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: a connection there is refused at once."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(("case", "source", "endpoints", "code"), [
    # the issue's: a presigned URL pasted into s3:// (S3 keys may hold '?', but a signature is no key anyone meant)
    ("query", "s3://team-data/m.tar.gz?X-Amz-Signature={secret}&X-Amz-Expires=60", {}, BAD_CONFIG),
    ("encoded query", "s3://team-data/m.tar.gz%3FX-Amz-Signature%3D{secret}%26X-Amz-Expires%3D60", {}, BAD_CONFIG),
    # what botocore's own error quotes: the endpoint as the pod's Secret gave it
    ("endpoint's token", "s3://team-data/models/m", {"AWS_ENDPOINT_URL": "http://127.0.0.1:{port}/?X-Amz-Security-Token={secret}"},
     DATA_UNAVAILABLE),
    ("endpoint's user", "s3://team-data/models/m", {"AWS_ENDPOINT_URL": "http://minio:{secret}@127.0.0.1:{port}"},
     DATA_UNAVAILABLE),
    # huggingface_hub's and requests' words: the Hub's URL with the endpoint's query in its path
    ("hub's token", "hf://org/tiny", {"HF_ENDPOINT": "http://127.0.0.1:{port}/?token={secret}"}, DATA_UNAVAILABLE),
])
def test_no_signature_reaches_a_line_the_termination_message_or_the_volume_from_a_refusing_endpoint(
        tmp_path, case, source, endpoints, code):
    """Against an endpoint that refuses the connection, every text the stager writes (its log, its termination
    message, index 0's failure note on the volume that every other index repeats) holds none of a credential,
    whether it is in the URI (refused before any request), or in another library's error text quoting a URL."""
    port = refused_port()
    volume = tmp_path / "volume"
    volume.mkdir()
    text = source.format(secret=SIGNATURE)
    environ = {storage.URI_VARIABLES["model"]: text, "INDEXED_TRAINER_STAGING_ATTEMPTS": "1",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2",
               **{name: value.format(port=port, secret=SIGNATURE) for name, value in endpoints.items()}}
    if code != BAD_CONFIG:
        environ["MODEL_DIR"] = storage.parse(text, "model").staged_path(str(volume), "model")
    termination = tmp_path / "termination-log"
    termination.touch()
    env = {"PATH": os.environ["PATH"], "HOME": str(OUTSIDE), "JOB_COMPLETION_INDEX": "0",
           "HF_HUB_DISABLE_TELEMETRY": "1", **environ}
    result = subprocess.run([str(BIN / "python"), "-c", WITH_TERMINATION_LOG, str(termination)], env=env,
                            cwd=volume, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    errors = [line for line in result.stdout.splitlines() if line.startswith("stage: error:")]
    assert len(errors) == 1 and "Traceback" not in output, output
    if code == BAD_CONFIG:
        assert "an s3:// URI takes no query" in errors[0] and "***" in errors[0], errors[0]
    written = {"output": output, "termination message": termination.read_text()}
    assert written["termination message"].startswith(f"exit {code}: staging failed: "), written
    written |= {str(path): path.read_bytes().decode(errors="replace") for path in volume.rglob("*") if path.is_file()}
    assert code == BAD_CONFIG or any(".failed-" in name for name in written), written  # index 0's note was written
    for where, what in written.items():
        assert SIGNATURE not in what and SIGNATURE not in unquote(unquote(what)), (case, where, what)


@pytest.mark.parametrize("planted", ["fifo", "link to /dev/zero", "a list", "huge"])
def test_a_marker_or_record_planted_on_the_volume_reads_as_absent_at_once(tmp_path, planted):
    """The stager's notes on the volume (a place's marker, index 0's failure and progress records) are data: a
    FIFO there would block the waiting indexes for ever, a link to /dev/zero exhaust their memory."""
    import time

    from trainer_stager import place

    where = tmp_path / "staged"
    where.mkdir()
    for note in (where / storage.MARKER, place.failure_file(where), place.progress_file(where)):
        note.parent.mkdir(parents=True, exist_ok=True)
        if planted == "fifo":
            os.mkfifo(note)
        elif planted == "link to /dev/zero":
            note.symlink_to("/dev/zero")
        elif planted == "a list":
            note.write_text('[1, 2, {"at": 1e99, "message": "planted"}]')
        else:
            note.write_bytes(b"[" * (8 << 20))
    began = time.monotonic()
    assert place.marker_of(where) is None
    place._raise_if_failed(where, 0.0)  # no failure of index 0 is read into it
    assert place._waiting_line(where, "the dataset", 3.0) == "index 0 has not started staging the dataset (3 s)"
    assert time.monotonic() - began < 2


def test_several_datasets_are_staged_each_under_its_name_and_the_other_index_waits_for_every_one(hub, s3, tmp_path):
    """initializer.datasets (INDEXED_TRAINER_DATASETS): a Hub dataset with its allow_patterns and a bucket prefix,
    each into DATASET_DIR/<name> with its own marker, by index 0 only; index 1 waits for each; a rerun fetches
    nothing."""
    from trainer_contract import datasets

    hub.add("org/chats", {"data/train.jsonl": b'{"messages": []}\n' * 500, "README.md": b"# chats\n"},
            repo_type="dataset")
    hub.faults.slow_bytes_per_second = 4_000  # a few seconds of transfer, so that index 1 waits
    client = s3.client()
    client.create_bucket(Bucket="team-data")
    client.put_object(Bucket="team-data", Key="support/part-0.jsonl", Body=b'{"messages": [1]}\n')
    entries = {"public": {"storage_uri": "hf://datasets/org/chats", "allow_patterns": ["data/*"]},
               "support": {"storage_uri": "s3://team-data/support"}}
    base = datasets.mixed_path(str(tmp_path), {name: entry["storage_uri"] for name, entry in entries.items()})
    environ = {datasets.DATASETS_VARIABLE: datasets.rendered(entries), "DATASET_DIR": base, "HF_ENDPOINT": hub.url,
               **s3.environ}
    follower = stager(environ, index=1, wait=False)
    leader = stager(environ)
    output, _ = follower.communicate(timeout=120)
    assert leader.returncode == 0, leader.stdout + leader.stderr
    assert follower.returncode == 0, output
    assert "waiting for index 0 to stage dataset org/chats@main" in output
    assert f"dataset s3://team-data/support staged at {base}/support by index 0" in output
    assert sorted(path.name for path in Path(base).iterdir() if not path.name.startswith(".")) == ["public", "support"]
    assert (Path(base) / "public/data/train.jsonl").stat().st_size == 17 * 500
    assert not (Path(base) / "public/README.md").exists()  # the patterns left it on the Hub
    assert (Path(base) / "support/part-0.jsonl").read_bytes() == b'{"messages": [1]}\n'
    for name in entries:
        assert json.loads((Path(base) / name / storage.MARKER).read_text())["uri"] == entries[name]["storage_uri"]
    assert len(hub.fetched("/data/train.jsonl")) == 1  # by index 0 only
    again = stager({**environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})  # nothing answers there
    assert again.returncode == 0 and again.stdout.count("nothing fetched") == 2, again.stdout


@pytest.mark.parametrize(("text", "words"), [
    ("[]", "write a JSON object of 1 to 16 datasets"),
    ('{"../up": {"storage_uri": "s3://team-data/x"}}', "a name is lower-case letters"),
    ('{"a": {"storage_uri": "/pvc-home/data"}}', "is a path on the shared volume, which is not staged"),
    ('{"a": {"storage_uri": "s3://team-data/x", "max_unpacked_bytes": -1}}', "max_unpacked_bytes is a positive"),
])
def test_a_datasets_variable_that_cannot_be_staged_is_refused_in_one_line(tmp_path, text, words):
    from trainer_contract import datasets

    result = stager({datasets.DATASETS_VARIABLE: text, "DATASET_DIR": str(tmp_path / "mix")})
    assert result.returncode == BAD_CONFIG and words in result.stdout and "Traceback" not in result.stderr, \
        result.stdout + result.stderr
    assert not (tmp_path / "mix").exists() or not any((tmp_path / "mix").iterdir())
