"""A model's and a data set's revision (what a resume must find again, what the token cache is keyed by) take a staged
file's SHA-256 from the stager's marker where it still has the size the stager verified, so a 7B model's 15 GB are
not read again by every rank at every start; the revision is the same value as when every file is read, and an
entry of the marker that is not a size and a SHA-256 is ignored (that file is read)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer_contract import digests, storage
from trainer_contract.digests import staged_sha256s
from trainer_runtime.pretrained.run_identity import data_revision, revision

FILES = {"model.safetensors": os.urandom(300_000), "config.json": b'{"hidden_size": 32}\n',
         "tokenizer.json": b'{"version": "1.0"}\n', "data/train.jsonl": b'{"text": "a"}\n'}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def staged(tmp_path: Path, entries: dict | None) -> Path:
    place = tmp_path / "place"
    for name, data in FILES.items():
        (place / name).parent.mkdir(parents=True, exist_ok=True)
        (place / name).write_bytes(data)
    if entries is not None:
        (place / storage.MARKER).write_text(json.dumps({"uri": "hf://org/m", "files": entries}))
    return place


def reads(monkeypatch) -> list[str]:
    """The names of the files read to be hashed, from here on."""
    read: list[str] = []
    original = digests.file_digest
    monkeypatch.setattr(digests, "file_digest", lambda path, *rest: read.append(path.name) or original(path, *rest))
    return read


TRUE = {name: {"bytes": len(data), "sha256": sha256(data)} for name, data in FILES.items()}
WEIGHTS = "model.safetensors"
CASES = {
    "the stager's digests: nothing read, the same revision": (TRUE, set(), True),
    "an S3 object's (its etag beside)": ({**TRUE, WEIGHTS: {**TRUE[WEIGHTS], "etag": "x-2"}}, set(), True),
    "a file grown since: read": ({**TRUE, WEIGHTS: {**TRUE[WEIGHTS], "bytes": 1}}, {WEIGHTS}, True),
    "a git blob id, not a SHA-256: read": ({**TRUE, WEIGHTS: {"bytes": 300_000, "blob_id": "ab" * 20}}, {WEIGHTS},
                                           True),
    "a digest that is no SHA-256: read": ({**TRUE, WEIGHTS: {"bytes": 300_000, "sha256": "Z" * 64}}, {WEIGHTS},
                                          True),
    "a size that is no integer: read": ({**TRUE, WEIGHTS: {"bytes": "300000", "sha256": TRUE[WEIGHTS]["sha256"]}},
                                        {WEIGHTS}, True),
    "a size that is a boolean: read": ({**TRUE, WEIGHTS: {"bytes": True, "sha256": TRUE[WEIGHTS]["sha256"]}},
                                       {WEIGHTS}, True),
    "no marker: every file read": (None, {WEIGHTS, "config.json"}, True),
    # the marker is taken at its word for a file of its size: another content under it is another revision
    "the marker's word for other weights": ({**TRUE, WEIGHTS: {"bytes": 300_000, "sha256": "0" * 64}}, set(), False),
}


@pytest.mark.parametrize(("entries", "read_names", "same"), CASES.values(), ids=CASES.keys())
def test_a_model_revision_reads_only_what_the_stager_does_not_vouch_for(tmp_path, monkeypatch, entries, read_names,
                                                                       same):
    baseline = revision(staged(tmp_path / "plain", None), False)
    place = staged(tmp_path, entries)
    read = reads(monkeypatch)
    assert (revision(place, False) == baseline) is same
    assert set(read) == read_names


def test_a_data_revision_takes_the_markers_digests_by_relative_name(tmp_path, monkeypatch):
    baseline = data_revision(staged(tmp_path / "plain", None))
    place = staged(tmp_path, TRUE)
    read = reads(monkeypatch)
    assert data_revision(place) == baseline and read == []


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=70),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                                       max_size=4), max_leaves=20))
def test_any_marker_reads_as_sizes_and_sha256s_or_nothing(tmp_path_factory, files):
    place = tmp_path_factory.mktemp("marker")
    (place / storage.MARKER).write_text(json.dumps({"files": files}))
    for name, (size, digest) in staged_sha256s(place).items():
        assert isinstance(name, str) and type(size) is int and len(digest) == 64 and int(digest, 16) >= 0
