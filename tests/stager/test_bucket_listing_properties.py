"""Property-based checks of what the stager reads back from a bucket or a Hub: a prefix's listing
(COMPLETE_OBJECT, which anyone who may write the bucket can replace) is the record the uploader writes, or one
StagingError naming it, never another exception (index 0 would die without recording its failure, the other
indexes would wait); a file name a Hub lists is taken only when it lands inside the directory."""

from __future__ import annotations

import json

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
ENTRY = st.fixed_dictionaries({"bytes": st.integers(min_value=0, max_value=2**40),
                               "md5": st.from_regex(r"[0-9a-f]{32}", fullmatch=True)})


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
@given(name=st.one_of(st.text(max_size=30), st.lists(st.sampled_from(["a", "..", ".", "", "b.json", "\\", "/", "\n"]),
                                                     min_size=1, max_size=5).map("/".join)))
def test_a_hub_file_name_is_taken_only_when_it_stays_inside(name):
    """A Hub's listing names the files (``siblings``): fetch_hf takes a name only when it lands inside."""
    from pathlib import Path

    from trainer_stager.fetch_hf import inside_name

    root = Path("/staging/into")
    if inside_name(name):
        assert (root / name).resolve().is_relative_to(root) and "\n" not in name
