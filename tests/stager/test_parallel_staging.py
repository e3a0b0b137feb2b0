"""Staging in parallel (issue 77, item 5) against real servers on 127.0.0.1: an https:// file in ranged parts, its
SHA-256 the whole file's, a wrong or short part refused; the Hub TRANSFERS files at a time; index 0's progress
said with its rate and time left; a waiting index that gives up on a stalled index 0 with the exit code and one
line saying what it waited for and what to do."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.storage_servers import FileServer, HubServer
from tests.stager.test_staging import sources, stager
from trainer_contract import storage
from trainer_contract.downloads import CHUNK
from trainer_contract.exit_codes import BAD_CONFIG, DATA_UNAVAILABLE, STALLED
from trainer_stager import fetch_https, place
from trainer_stager.errors import StagingError

MB = place.MB
SMALL_PARTS = fetch_https.Parts(smallest=200_000, largest=300_000, workers=4)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "served").mkdir()
    server = FileServer(tmp_path / "served")
    server.ranges = True
    yield server
    server.close()


def _fetch(server: FileServer, name: str, into: Path, parts: fetch_https.Parts = SMALL_PARTS) -> dict:
    into.mkdir(parents=True)
    progress = place.Progress(into.parent / "place", "model weights", lambda line: None)
    return fetch_https.fetch(storage.parse(f"{server.url}/{name}", "model"), into, progress, parts=parts)


def test_a_file_is_fetched_in_parallel_ranged_parts_and_its_digest_is_the_whole_files(files, tmp_path):
    data = os.urandom(1_500_007)
    (files.root / "weights.bin").write_bytes(data)
    files.faults.slow_bytes_per_second = SMALL_PARTS.largest // 2  # each part a second or more: they overlap
    fetched = _fetch(files, "weights.bin", tmp_path / "into")
    assert (tmp_path / "into/weights.bin").read_bytes() == data
    assert fetched["sha256"] == hashlib.sha256(data).hexdigest() and fetched["bytes"] == len(data)
    assert len(files.fetched()) == len(fetch_https.plan(len(data), SMALL_PARTS)) > SMALL_PARTS.workers
    # the parts overlapped, never more than the workers (how many at once depends on the machine's load)
    assert 2 <= files.most_in_flight <= SMALL_PARTS.workers


def test_a_server_that_ignores_ranges_is_read_in_one_stream(files, tmp_path):
    data = os.urandom(700_000)
    (files.root / "weights.bin").write_bytes(data)
    files.ranges = False
    fetched = _fetch(files, "weights.bin", tmp_path / "into")
    assert fetched["sha256"] == hashlib.sha256(data).hexdigest() and files.fetched() == ["/weights.bin"]


def test_an_empty_file_has_no_range_and_is_fetched_whole(files, tmp_path):
    (files.root / "empty.bin").write_bytes(b"")
    fetched = _fetch(files, "empty.bin", tmp_path / "into")
    assert fetched["bytes"] == 0 and fetched["sha256"] == hashlib.sha256(b"").hexdigest()
    assert (tmp_path / "into/empty.bin").read_bytes() == b""


@pytest.mark.parametrize(("fault", "words"), [("wrong", "asked for bytes 200000-"),
                                               ("short", "connection cut after")])
def test_a_wrong_or_short_part_is_refused_in_one_line(files, tmp_path, fault, words):
    (files.root / "weights.bin").write_bytes(os.urandom(1_000_000))
    files.range_fault = fault
    with pytest.raises(StagingError) as refused:
        _fetch(files, "weights.bin", tmp_path / "into")
    assert words in str(refused.value) and "\n" not in str(refused.value) and refused.value.retryable


@pytest.mark.parametrize("fault", ["wrong", "short"])
def test_the_stager_refuses_a_spoiled_part_with_the_retryable_exit_and_stages_nothing(files, tmp_path, fault):
    """The default parts (8 MB first): a 12 MB file is two parts, the second spoiled."""
    (files.root / "weights.bin").write_bytes(os.urandom(12 * MB))
    files.range_fault = fault
    environ = {**sources("model", f"{files.url}/weights.bin", tmp_path), "INDEXED_TRAINER_STAGING_ATTEMPTS": "1"}
    result = stager(environ)
    assert result.returncode == DATA_UNAVAILABLE, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if line.startswith("stage: error:")]
    assert len(errors) == 1 and "weights.bin" in errors[0], result.stdout
    assert "Traceback" not in result.stdout + result.stderr and not Path(environ["MODEL_DIR"]).exists()


def test_the_stager_stages_a_file_in_parts_and_records_its_digest(files, tmp_path):
    data = os.urandom(12 * MB)
    (files.root / "weights.bin").write_bytes(data)
    environ = sources("model", f"{files.url}/weights.bin", tmp_path)
    result = stager(environ)
    assert result.returncode == 0, result.stdout + result.stderr
    marker = json.loads((Path(environ["MODEL_DIR"]) / storage.MARKER).read_text())
    assert marker["sha256"] == hashlib.sha256(data).hexdigest() and marker["bytes"] == len(data)
    assert len(files.fetched()) == 2


@settings(max_examples=200, deadline=None)
@given(start=st.integers(0, 2**62), length=st.integers(1, 2**40), extra=st.integers(0, 2**40),
       stated=st.booleans())
def test_a_content_range_is_read_back_as_written(start, length, extra, stated):
    end, total = start + length - 1, start + length + extra
    header = f"bytes {start}-{end}/{total if stated else '*'}"
    assert fetch_https.content_range(header) == (start, end, total if stated else None)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_a_content_range_is_a_satisfied_range_or_none(text):
    parsed = fetch_https.content_range(text)
    assert parsed is None or (parsed[0] <= parsed[1] and (parsed[2] is None or parsed[1] < parsed[2]))


@pytest.mark.parametrize("header", ["bytes 5-4/10", "bytes 0-10/10", "bytes */10", "bytes 0-1/", "items 0-1/2",
                                    "bytes -1-2/3", "bytes 0-1/2 extra", "", None])
def test_a_content_range_that_is_no_satisfied_range_is_none(header):
    assert fetch_https.content_range(header) is None


@settings(max_examples=300, deadline=None)
@given(total=st.integers(1, 10**12), fraction=st.integers(1, 500), extra=st.integers(0, 10**9),
       workers=st.integers(1, 32))
def test_the_parts_cover_the_file_once_in_order_within_their_bounds(total, fraction, extra, workers):
    smallest = max(total // fraction, 1)  # a few hundred parts at most: the plan is a list
    parts = fetch_https.Parts(smallest=smallest, largest=smallest + extra, workers=workers)
    spans = fetch_https.plan(total, parts)
    assert spans[0][0] == 0 and spans[-1][1] == total - 1
    assert all(after[0] == before[1] + 1 for before, after in zip(spans, spans[1:], strict=False))
    assert all(end - start + 1 <= parts.largest for start, end in spans)
    assert all(end - start + 1 >= min(parts.smallest, total) for start, end in spans[:-1])


def test_the_hub_is_fetched_transfers_files_at_a_time(tmp_path):
    hub = HubServer()
    try:
        rate = 4_000  # each file a second of transfer (two chunks), so that the workers' requests overlap
        hub.add("org/sharded", {f"shard-{number:02d}.json": os.urandom(2 * rate)
                                for number in range(place.TRANSFERS + 2)})
        hub.faults.slow_bytes_per_second = rate
        environ = {**sources("model", "hf://org/sharded", tmp_path), "HF_ENDPOINT": hub.url}
        result = stager(environ)
        assert result.returncode == 0, result.stdout + result.stderr
        assert hub.most_in_flight == place.TRANSFERS
        assert len(list(Path(environ["MODEL_DIR"]).glob("shard-*.json"))) == place.TRANSFERS + 2
    finally:
        hub.close()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_progress_line_says_the_rate_and_the_time_left_and_the_waiting_index_repeats_it(tmp_path):
    lines: list[str] = []
    clock = FakeClock()
    where = tmp_path / "model"
    progress = place.Progress(where, "model org/name@rev", lines.append, clock=clock, total=840 * MB)
    clock.now = 10.0
    progress.add(120 * MB)
    clock.now = 20.0
    progress.add(380 * MB)
    assert lines == ["staging model org/name@rev: 120/840 MB, 12 MB/s, ETA 60 s",
                     "staging model org/name@rev: 500/840 MB, 38 MB/s, ETA 9 s"]
    assert place._waiting_line(where, "model org/name@rev", 30.0) == \
        "index 0 is staging model org/name@rev: 500/840 MB, 38 MB/s, ETA 9 s"
    assert place._waiting_line(where, "model org/name@rev", 300.0, quiet=200.0) == \
        "index 0 is staging model org/name@rev: 500/840 MB (no progress for 3 min)"


@pytest.mark.parametrize(("seconds", "said"), [(0.4, "0 s"), (7, "7 s"), (119, "119 s"), (300, "5 min"),
                                                (7300, "2 h 02 min")])
def test_a_duration_is_said_in_the_unit_that_reads(seconds, said):
    assert place.duration(seconds) == said


def test_a_waiting_index_gives_up_on_a_stalled_index_0_with_the_stalled_exit_and_one_line(files, tmp_path):
    """Index 0 stopped mid-download (SIGSTOP: hung, not dead, so it records no failure): the waiting index's
    bound (2 s here) ends its wait with 76 and a line naming what it waited for, how far index 0 got, what to do."""
    (files.root / "weights.bin").write_bytes(os.urandom(4 * CHUNK))
    files.faults.slow_bytes_per_second = CHUNK  # a chunk a second: index 0 publishes after the first
    environ = sources("model", f"{files.url}/weights.bin", tmp_path)
    leader = stager(environ, wait=False)
    try:
        record = place.progress_file(Path(environ["MODEL_DIR"]))
        deadline = time.monotonic() + 30
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert record.exists(), "index 0 published no progress"
        leader.send_signal(signal.SIGSTOP)
        follower = stager({**environ, place.STALL_VARIABLE: "2"}, index=1, timeout=60)
    finally:
        leader.send_signal(signal.SIGKILL)
        leader.communicate(timeout=30)
    assert follower.returncode == STALLED, follower.stdout + follower.stderr
    errors = [line for line in follower.stdout.splitlines() if line.startswith("stage: error:")]
    assert len(errors) == 1, follower.stdout
    assert "index 0's staging of model " in errors[0] and "made no progress for 2 s" in errors[0]
    assert "stage step's log" in errors[0] and f"{place.STALL_VARIABLE}=2 s" in errors[0]
    assert "Traceback" not in follower.stdout + follower.stderr


def test_a_waiting_index_whose_index_0_never_begins_gives_up_saying_so(tmp_path):
    environ = {**sources("model", "https://example.invalid/weights.bin", tmp_path), place.STALL_VARIABLE: "1"}
    follower = stager(environ, index=1, timeout=60)
    assert follower.returncode == STALLED and "index 0 has not begun staging model " in follower.stdout, \
        follower.stdout
    refused = stager({**environ, place.STALL_VARIABLE: "soon"}, index=1, timeout=60)
    assert refused.returncode == BAD_CONFIG and "write a positive number of seconds" in refused.stdout
