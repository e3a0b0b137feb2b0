"""Property-based checks of what the stager reads back from a bucket or a Hub: a prefix's listing
(COMPLETE_OBJECT, which anyone who may write the bucket can replace) is the record the uploader writes, or one
StagingError naming it, never another exception (index 0 would die without recording its failure, the other
indexes would wait); a file name a Hub lists is taken only when it lands inside the directory."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer_contract import storage
from trainer_stager.errors import StagingError
from trainer_stager.upload import read_listing

URI = storage.parse("s3://team-ckpt/run/ckpt-e0001-s000000.pt", "checkpoint")
CHECKS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                       max_leaves=12)
SIZE = st.integers(min_value=0, max_value=2**40)
MD5, SHA256 = st.from_regex(r"[0-9a-f]{32}", fullmatch=True), st.from_regex(r"[0-9a-f]{64}", fullmatch=True)
# what the uploader writes ({bytes, sha256}), what an earlier version wrote ({bytes, md5}), or both
ENTRY = st.one_of(st.fixed_dictionaries({"bytes": SIZE, "sha256": SHA256}), st.fixed_dictionaries({"bytes": SIZE, "md5": MD5}),
                  st.fixed_dictionaries({"bytes": SIZE, "sha256": SHA256, "md5": MD5}))


@CHECKS
@given(body=st.one_of(st.binary(max_size=64), JSONISH.map(lambda value: json.dumps(value).encode()),
                      st.dictionaries(st.text(max_size=6), JSONISH, max_size=3).map(
                          lambda files: json.dumps({"files": files}).encode())))
def test_any_body_is_a_listing_or_one_error_naming_the_object(body):
    try:
        record = read_listing(body, URI)
    except StagingError as error:
        assert not error.retryable and str(error).startswith(f"{URI.text}/{storage.COMPLETE_OBJECT}: ")
        assert "\n" not in str(error)
        return
    assert all(isinstance(item["bytes"], int) and item["bytes"] >= 0 for item in record["files"].values())


@CHECKS
@given(files=st.dictionaries(st.text(min_size=1, max_size=20), ENTRY, max_size=5))
def test_what_the_uploader_writes_reads_back(files):
    assert read_listing(json.dumps({"files": files, "uploaded_at": "x"}).encode(), URI)["files"] == files


@CHECKS
@given(entry=ENTRY, damage=st.sampled_from(["no digest", "short", "not hex", "not a string", "size"]),
       key=st.sampled_from(["sha256", "md5"]))
def test_an_entry_without_a_well_formed_digest_is_refused_naming_it(entry, damage, key):
    """Each digest given must be well-formed, and one at least given: a restore checks every file by one."""
    entry = dict(entry)
    if damage == "no digest":
        entry.pop("sha256", None), entry.pop("md5", None)
    elif damage == "size":
        entry["bytes"] = True
    elif key in entry:
        entry[key] = {"short": entry[key][:-1], "not hex": "X" + entry[key][1:], "not a string": 7}[damage]
    else:
        entry[key] = 0
    with pytest.raises(StagingError, match="the entry of 'weights.bin' is not"):
        read_listing(json.dumps({"files": {"weights.bin": entry}}).encode(), URI)


@CHECKS
@given(name=st.one_of(st.text(max_size=30), st.lists(st.sampled_from(["a", "..", ".", "", "b.json", "\\", "/", "\n"]),
                                                     min_size=1, max_size=5).map("/".join)))
def test_a_hub_file_name_is_taken_only_when_it_stays_inside(name):
    """A Hub's listing names the files (``siblings``): fetch_hf takes a name only when it lands inside."""
    from pathlib import Path

    from trainer_stager.fetch_hf import inside_name

    root = Path("/staging/into")
    if inside_name(name):
        assert (root / name).resolve().is_relative_to(root) and "\n" not in name
