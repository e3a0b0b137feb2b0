"""Bytes from outside into a file, bounded (trainer_contract.downloads), against a real HTTP server on 127.0.0.1:
what fits is written whole, what does not stops at its limit, what is cut short is an error."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.http_mirror import Mirror
from trainer_contract.downloads import CHUNK, CutShort, TooLarge, copy_bounded, http_get


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 3 * CHUNK + 7), limit=st.one_of(st.none(), st.integers(0, 3 * CHUNK + 7)))
def test_a_copy_is_whole_when_it_fits_and_never_writes_past_its_limit(tmp_path_factory, size, limit):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    target = tmp_path_factory.mktemp("copy") / "file"
    seen = []
    if limit is None or size <= limit:
        assert copy_bounded(io.BytesIO(data), target, limit, on_chunk=seen.append) == size
        assert target.read_bytes() == data and b"".join(seen) == data
    else:
        with pytest.raises(TooLarge, match=f"^the answer is over {limit} bytes$"):
            copy_bounded(io.BytesIO(data), target, limit, on_chunk=seen.append)
        written = target.read_bytes()
        assert len(written) <= limit and written == b"".join(seen) == data[:len(written)]


def test_an_answer_is_bounded_by_what_it_announces_or_by_the_limit_without_an_announcement(tmp_path):
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "file.bin").write_bytes(b"x" * 5000)
    (tmp_path / "served" / "cut.bin").write_bytes(b"y" * 5000)
    told = []

    def limit(announced):
        told.append(announced)
        return 10_000

    with Mirror(tmp_path / "served", truncate={"cut.bin"}, endless={"endless.bin"}) as mirror:
        assert http_get(f"{mirror.url}file.bin", tmp_path / "file", 10, limit) == 5000
        assert (tmp_path / "file").read_bytes() == b"x" * 5000 and told == [5000]
        with pytest.raises(TooLarge, match="^the answer is 5000 bytes, over 4000$"):
            http_get(f"{mirror.url}file.bin", tmp_path / "small", 10, lambda announced: 4000)
        assert not (tmp_path / "small").exists(), "refused before anything is written"
        with pytest.raises(TooLarge, match="^the answer is over 10000 bytes$"):
            http_get(f"{mirror.url}endless.bin", tmp_path / "endless", 10, limit)
        assert told[-1] is None and (tmp_path / "endless").stat().st_size <= 10_000
        with pytest.raises(CutShort, match="^connection cut after 2500 of 5000 bytes$"):
            http_get(f"{mirror.url}cut.bin", tmp_path / "cut", 10, limit)
