"""--output-dir: files written 0644, all or nothing, and only the files an earlier render recorded are removed."""

import json
import os
import stat

import pytest

from generator.errors import OutputError
from generator.output import MAX_RECORD_BYTES, RECORD, recorded_files, write_manifests
from generator.templating import Manifest
from tests.generator.helpers import run_main


def _manifests(*names: str) -> list[Manifest]:
    return [Manifest("Thing", name, f"kind: Thing  # {name}\n") for name in names]


def _names(directory) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_users_own_file_survives_renders(tmp_path):
    out = tmp_path / "build"
    assert run_main("--output-dir", str(out)).exit_code == 0
    (out / "5-podmonitor.yaml").write_text("kind: PodMonitor\n")
    (out / "kustomization.yaml").write_text("resources: []\n")
    for _ in range(2):
        assert run_main("--output-dir", str(out), "--set", "shared_volume.existing_claim=data").exit_code == 0
    assert _names(out) == [RECORD, "2-configmap.yaml", "3-service.yaml", "4-job.yaml", "5-podmonitor.yaml",
                           "kustomization.yaml"]


def test_a_file_the_previous_render_wrote_and_this_one_does_not_is_removed(tmp_path):
    write_manifests(_manifests("1-claim.yaml", "2-job.yaml", "job.sbatch"), tmp_path)
    assert json.loads((tmp_path / RECORD).read_text()) == {"files": ["1-claim.yaml", "2-job.yaml", "job.sbatch"]}
    written = write_manifests(_manifests("2-job.yaml"), tmp_path)
    assert written == [tmp_path / "2-job.yaml"]
    assert _names(tmp_path) == [RECORD, "2-job.yaml"]
    assert recorded_files(tmp_path) == {"2-job.yaml"}


def test_without_a_record_nothing_else_is_removed(tmp_path):
    (tmp_path / "1-persistentvolumeclaim.yaml").write_text("an older version's render\n")
    write_manifests(_manifests("4-job.yaml"), tmp_path)
    assert _names(tmp_path) == [RECORD, "1-persistentvolumeclaim.yaml", "4-job.yaml"]


def test_files_and_the_record_are_0644_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        write_manifests(_manifests("4-job.yaml"), tmp_path)
    finally:
        os.umask(old)
    for path in tmp_path.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path.name
    write_manifests(_manifests("4-job.yaml"), tmp_path)  # a rewrite too
    assert stat.S_IMODE((tmp_path / "4-job.yaml").stat().st_mode) == 0o644


@pytest.mark.parametrize("name", ["../outside.yaml", "/etc/passwd", "sub/x.yaml", "..", ".", "", ".hidden",
                                  RECORD, "a\\b", "nul\x00.yaml", 7, None, ["x"]])
def test_a_record_never_names_a_file_outside_the_directory(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "outside.yaml").write_text("keep")
    (out / "sub").mkdir()
    (out / "sub" / "x.yaml").write_text("keep")
    (out / ".hidden").write_text("keep")
    (out / RECORD).write_text(json.dumps({"files": [name]}))
    assert recorded_files(out) == set()
    write_manifests(_manifests("4-job.yaml"), out)
    assert (tmp_path / "outside.yaml").read_text() == "keep"
    assert (out / "sub" / "x.yaml").read_text() == "keep" and (out / ".hidden").read_text() == "keep"


def test_a_link_is_neither_followed_nor_removed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "target.yaml"
    target.write_text("keep")
    (out / "3-service.yaml").symlink_to(target)
    (out / "sub").mkdir()
    (out / RECORD).write_text(json.dumps({"files": ["3-service.yaml", "sub"]}))
    write_manifests(_manifests("4-job.yaml"), out)
    assert (out / "3-service.yaml").is_symlink() and target.read_text() == "keep"
    assert (out / "sub").is_dir()


def test_a_record_that_is_a_link_is_not_read(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "2-job.yaml").write_text("a user's")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"files": ["2-job.yaml"]}))
    (out / RECORD).symlink_to(elsewhere)
    assert recorded_files(out) == set()
    write_manifests(_manifests("4-job.yaml"), out)  # the link is replaced by a record of our own
    assert (out / "2-job.yaml").read_text() == "a user's"
    assert not (out / RECORD).is_symlink() and elsewhere.read_text() == json.dumps({"files": ["2-job.yaml"]})


def test_a_record_that_is_a_fifo_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / RECORD)
    assert recorded_files(tmp_path) == set()


@pytest.mark.parametrize("content", [
    b"not json", b"\xff\xfe", b"[1, 2]", b'"text"', b"{}", b'{"files": "2-job.yaml"}', b'{"files": {"a": 1}}',
    b"[" * 50_000 + b"]" * 50_000,
    json.dumps({"files": ["2-job.yaml"], "pad": "x" * MAX_RECORD_BYTES}).encode(),
], ids=["text", "not-utf8", "list", "string", "no-files", "files-a-string", "files-a-map", "deep", "huge"])
def test_a_malformed_or_huge_record_is_treated_as_absent(tmp_path, content):
    (tmp_path / "2-job.yaml").write_text("kept")
    (tmp_path / RECORD).write_bytes(content)
    assert recorded_files(tmp_path) == set()
    write_manifests(_manifests("4-job.yaml"), tmp_path)
    assert (tmp_path / "2-job.yaml").read_text() == "kept"
    assert recorded_files(tmp_path) == {"4-job.yaml"}


def test_a_failed_write_leaves_the_previous_render_and_record(tmp_path, monkeypatch):
    write_manifests(_manifests("1-claim.yaml", "4-job.yaml"), tmp_path)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    calls = []
    real_fsync = os.fsync

    def fsync_then_full(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_then_full)
    with pytest.raises(OutputError, match="No space left on device"):
        write_manifests(_manifests("0-first.yaml", "4-job.yaml"), tmp_path)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
