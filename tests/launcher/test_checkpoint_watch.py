"""A user's program's checkpoints in a bucket (checkpoint.storage_uri with entrypoint.script or .module): the naming
rule of the directory convention (trainer_contract/checkpoint_layout.py's OWN_PROGRAM), node 0's launcher's watch
over INDEXED_TRAINER_CHECKPOINT_DIR (trainer_launcher/checkpoint_watch.py) handing each new newest entry to the
checkpoint mirror, and the stager restoring the bucket's newest into that directory on a volume with none. Against
moto's S3 in this process (the stager in a subprocess); the run under local-job is tests/examples/test_examples.py's."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.stager.test_staging import stager
from trainer_contract import checkpoint_layout as layout
from trainer_contract import storage
from trainer_contract.exit_codes import BAD_CONFIG, OK
from trainer_contract.settings import ConfigError
from trainer_launcher.checkpoint_watch import CheckpointWatch, watch_from
from trainer_stager import checkpoint_bucket as remote

BUCKET = "team-ckpt"


@pytest.fixture
def s3(checkpoint_s3):
    """moto's S3 in this process, with the bucket BUCKET (tests/conftest.py)."""
    return checkpoint_s3


def write(directory: Path, name: str, data: bytes = b"x" * 1000, *, sharded: bool = False) -> Path:
    """A checkpoint as the convention has the program write it: under a "." name, renamed into place when whole."""
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / f".partial-{name}"
    if sharded:
        temporary.mkdir()
        for part in ("rank-0.pt", "rank-1.pt", ".metadata"):
            (temporary / part).write_bytes(data)
    else:
        temporary.write_bytes(data)
    os.rename(temporary, directory / name)
    return directory / name


def environ_for(s3, directory: Path, prefix: str) -> dict[str, str]:
    return {**s3.environ, storage.URI_VARIABLES["checkpoint"]: f"s3://{BUCKET}/{prefix}",
            layout.CHECKPOINT_DIR_VARIABLE: str(directory)}


def test_every_entry_not_starting_with_a_dot_is_a_checkpoint_and_the_newest_sorts_last(tmp_path):
    for name in ("step-00000009.pt", "step-00000010.pt", ".partial-step-00000011.pt", ".tmp-x", ".hidden"):
        write(tmp_path, name)
    write(tmp_path, "step-00000008", sharded=True)  # a directory is one checkpoint too
    listed = [path.name for _, path in layout.list_checkpoints(tmp_path, layout.OWN_PROGRAM)]
    assert listed == ["step-00000010.pt", "step-00000009.pt", "step-00000008"]
    assert layout.OWN_PROGRAM.order(layout.TEMP_PREFIX + "step-00000099.pt") is None
    # by the name's own order, as sorted() has it: unpadded numbers sort as text (the convention says: pad them)
    assert max(["step-9", "step-10"], key=layout.OWN_PROGRAM.order) == "step-9"
    layout.prune(tmp_path, 1, layout.OWN_PROGRAM)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        ".hidden", ".partial-step-00000011.pt", ".tmp-x", "step-00000010.pt"]


class RecordingMirror:
    def __init__(self):
        self.offered: list[str] = []
        self.closed = False

    def offer(self, checkpoint: Path) -> None:
        self.offered.append(checkpoint.name)

    def close(self) -> None:
        self.closed = True


def wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


def test_the_watch_offers_each_new_newest_entry_once_and_the_newest_again_when_it_closes(tmp_path):
    directory = tmp_path / "checkpoints"  # not there yet: the program makes it
    mirror = RecordingMirror()
    watch = CheckpointWatch(mirror, directory, print, every=0.05)  # type: ignore[arg-type]
    write(directory, "step-00000010.pt")
    wait_for(lambda: mirror.offered == ["step-00000010.pt"])
    (directory / ".partial-step-00000020.pt").write_bytes(b"half")  # a write in progress is never offered
    time.sleep(0.2)
    assert mirror.offered == ["step-00000010.pt"]
    os.rename(directory / ".partial-step-00000020.pt", directory / "step-00000020.pt")
    wait_for(lambda: mirror.offered[-1] == "step-00000020.pt")
    write(directory, "step-00000030.pt")
    watch.close()  # the last one, even when the poll has not seen it yet, then the mirror closed
    assert mirror.offered[-1] == "step-00000030.pt" and mirror.offered.count("step-00000020.pt") == 1
    assert mirror.closed and not watch.thread.is_alive()


def test_a_sigterm_while_the_last_upload_is_in_flight_does_not_cut_it_off(tmp_path, capsys):
    """The launcher's close_watch when the Job fails and the pod gets its SIGTERM while the mirror still uploads: the
    signal's exception interrupts the wait, and waiting again lasts until the upload is done. On CPython before
    3.13 a Thread.join so interrupted marks the thread stopped, and the launcher exited mid-upload (seen in CI:
    examples/own-checkpoints' step 20 never reached the bucket)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from trainer_launcher.launch import close_watch
    from trainer_stager.checkpoint_mirror import CheckpointMirror

    uploaded: list[str] = []

    class SlowBucket:
        def upload(self, uri, checkpoint: Path, say) -> None:
            time.sleep(1.0)
            uploaded.append(checkpoint.name)

        def remove_except(self, uri, kept, naming) -> list[str]:
            return []

    directory = tmp_path / "checkpoints"
    write(directory, "step-00000020.pt")
    mirror = CheckpointMirror(storage.parse(f"s3://{BUCKET}/own", "checkpoint"), directory, layout.OWN_PROGRAM, print)
    mirror.remote = SlowBucket()  # type: ignore[assignment]
    watch = CheckpointWatch(mirror, directory, print, every=60)  # its first poll offers step 20 at once
    wait_for(lambda: watch.offered == "step-00000020.pt")

    def sigterm(signum, frame):  # as torch's handler in the launcher raises it
        raise SignalException("SIGTERM", sigval=signal.SIGTERM)

    previous = signal.signal(signal.SIGALRM, sigterm)
    signal.setitimer(signal.ITIMER_REAL, 0.3)  # while close waits for the upload
    try:
        close_watch(watch)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert uploaded == ["step-00000020.pt"]
    assert "checkpoint mirror: SIGTERM received; finishing the upload in flight" in capsys.readouterr().err


def test_the_user_programs_checkpoints_reach_the_bucket_and_an_empty_volume_gets_the_newest_back(s3, tmp_path):
    directory = tmp_path / "first-volume/runs/own/checkpoints"
    said: list[str] = []
    watch = watch_from(environ_for(s3, directory, "own"), "0", said.append)
    assert isinstance(watch, CheckpointWatch)
    write(directory, "step-00000010.pt", b"a" * 5000)
    newest = write(directory, "step-00000020", b"b" * 5000, sharded=True)
    (directory / "step-00000010.pt").unlink()  # the program prunes: the bucket follows
    watch.close()
    uri = storage.parse(f"s3://{BUCKET}/own", "checkpoint")
    assert remote.listed(uri, layout.OWN_PROGRAM) == {"step-00000020": True}, said
    assert any(line.startswith("checkpoint mirror: uploaded 3 files") for line in said), said

    volume = tmp_path / "new-volume/runs/own/checkpoints"
    follower = stager(environ_for(s3, volume, "own"), index=1, wait=False)
    leader = stager(environ_for(s3, volume, "own"))
    assert leader.returncode == OK, leader.stdout + leader.stderr
    assert f"stage: checkpoint step-00000020 restored from s3://{BUCKET}/own into {volume} (" in leader.stdout
    assert follower.wait(60) == OK and "index 0 decided: checkpoint step-00000020" in follower.stdout.read()
    assert {path.name: path.read_bytes() for path in (volume / "step-00000020").iterdir()} == {
        path.name: path.read_bytes() for path in newest.iterdir()}
    assert sorted(path.name for path in volume.iterdir()) == ["step-00000020"]  # nothing else in the directory
    again = stager(environ_for(s3, volume, "own"))  # the directory holds one: the bucket is not read
    assert "stage: the volume holds step-00000020: nothing restored" in again.stdout


def test_a_built_in_programs_flag_and_the_users_directory_together_are_refused(s3, tmp_path):
    result = stager(environ_for(s3, tmp_path / "c", "own"), args=["--program", "worker.qa"])
    assert result.returncode == BAD_CONFIG
    assert result.stdout.strip().splitlines()[-1].startswith(
        "stage: error: python -m worker.staging: --program worker.qa restores a built-in program's checkpoints, and "
        "INDEXED_TRAINER_CHECKPOINT_DIR names a program of your own's directory")


def test_only_node_0_watches_and_only_when_both_variables_are_set(s3, tmp_path):
    environ = environ_for(s3, tmp_path, "own")
    assert watch_from(environ, "1", print) is None
    assert watch_from({**environ, layout.CHECKPOINT_DIR_VARIABLE: ""}, "0", print) is None
    assert watch_from({layout.CHECKPOINT_DIR_VARIABLE: str(tmp_path)}, "0", print) is None


def test_without_boto3_the_launcher_exits_78_in_one_line_before_torchrun(s3, tmp_path, monkeypatch, capsys):
    from torch.distributed.run import parse_args

    from trainer_launcher import launch

    monkeypatch.setitem(sys.modules, "boto3", None)  # find_spec("boto3") is None: not installed
    environ = environ_for(s3, tmp_path, "own")
    with pytest.raises(ConfigError, match="boto3 is not installed here"):
        watch_from(environ, "0", print)
    code = launch.run_training(parse_args(["--standalone", "--nproc-per-node=1", "never-run.py"]), environ)
    assert code == BAD_CONFIG
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"launcher: configuration error: checkpoint.storage_uri s3://{BUCKET}/own: boto3 is not installed "
                     "here: pip install 'indexed-trainer[staging]' (the image has it); exiting 78"]


def test_a_bucket_that_refuses_stops_the_mirror_in_one_line_and_the_watch_goes_on(tmp_path, s3):
    directory = tmp_path / "checkpoints"
    said: list[str] = []
    watch = watch_from({**s3.environ, storage.URI_VARIABLES["checkpoint"]: "s3://no-such-bucket/own",
                        layout.CHECKPOINT_DIR_VARIABLE: str(directory)}, "0", said.append)
    assert watch is not None
    write(directory, "step-00000001.pt")
    closing = threading.Thread(target=watch.close)
    closing.start()
    closing.join(30)
    assert not closing.is_alive()
    assert len(said) == 1 and said[0].startswith("checkpoint mirror stopped: s3://no-such-bucket/own/step-00000001.pt: "
                                                 "NoSuchBucket"), said
