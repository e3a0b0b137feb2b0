"""Downloading MNIST: verified, atomic, all or nothing; files present means no network at all."""

import gzip
import hashlib
import json

import pytest
import torch

from testbed.http_mirror import Mirror
from testbed.mnist_data import dataset_files, raw_files, synthetic_digits, write_mirror, write_raw
from worker.mnist.mnist_files import MARKER, DataError, check_idx, check_raw_files, download, raw_dir, read_checksums

SMALL = raw_files(synthetic_digits(64, seed=1), synthetic_digits(32, seed=2))


def test_download_verifies_installs_and_marks(tmp_path):
    checksums = read_checksums(write_mirror(tmp_path / "mirror", SMALL))
    with Mirror(tmp_path / "mirror") as mirror:
        download(tmp_path / "data", [mirror.url], checksums, log=lambda _: None)
        assert sum(mirror.requests.values()) == 4
    raw = raw_dir(tmp_path / "data")
    assert {p.name for p in raw.iterdir()} == set(SMALL) | {MARKER}
    assert check_raw_files(raw)["train-images-idx3-ubyte"] == 64
    marker = json.loads((raw / MARKER).read_text())["sha256"]
    assert marker["t10k-labels-idx1-ubyte"] == hashlib.sha256(SMALL["t10k-labels-idx1-ubyte"]).hexdigest()
    assert not list((tmp_path / "data" / "MNIST").glob(".download-*")), "the staging directory is removed"


def test_cut_off_download_installs_nothing(tmp_path):
    checksums = read_checksums(write_mirror(tmp_path / "mirror", SMALL))
    with Mirror(tmp_path / "mirror", truncate={"t10k-images-idx3-ubyte.gz"}) as mirror:
        with pytest.raises(DataError, match="t10k-images-idx3-ubyte.gz"):
            download(tmp_path / "data", [mirror.url], checksums, log=lambda _: None)
    assert not raw_dir(tmp_path / "data").exists() or not any(raw_dir(tmp_path / "data").iterdir())


def test_wrong_hash_from_the_mirror_is_refused(tmp_path):
    checksums_file = write_mirror(tmp_path / "mirror", SMALL)
    # the mirror serves other bytes than the checksums promise
    (tmp_path / "mirror" / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x01" + b"\x00" * 4))
    with Mirror(tmp_path / "mirror") as mirror:
        with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: sha256 \w+ does not match"):
            download(tmp_path / "data", [mirror.url], read_checksums(checksums_file), log=lambda _: None)
    assert not (raw_dir(tmp_path / "data") / "train-labels-idx1-ubyte").exists()


def test_an_answer_without_end_is_cut_at_the_bound_and_nothing_is_installed(tmp_path):
    checksums = read_checksums(write_mirror(tmp_path / "mirror", SMALL))
    with Mirror(tmp_path / "mirror", endless={"t10k-images-idx3-ubyte.gz"}) as mirror:
        with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte.gz: the answer is over 1048576 bytes, which no "
                                            r"MNIST-format file needs"):
            download(tmp_path / "data", [mirror.url], checksums, log=lambda _: None, limit=1 << 20)
    assert not raw_dir(tmp_path / "data").exists() or not any(raw_dir(tmp_path / "data").iterdir())
    assert not list((tmp_path / "data" / "MNIST").glob(".download-*")), "the staging directory is removed"


def test_an_announced_size_over_the_bound_is_refused_before_reading(tmp_path):
    checksums = read_checksums(write_mirror(tmp_path / "mirror", SMALL))
    (tmp_path / "mirror" / "train-labels-idx1-ubyte.gz").write_bytes(bytes(2_000_000))
    with Mirror(tmp_path / "mirror") as mirror:
        with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: the answer is 2000000 bytes, over 1048576"):
            download(tmp_path / "data", [mirror.url], checksums, log=lambda _: None, limit=1 << 20)


def test_a_gzip_bomb_the_checksums_vouch_for_is_cut_at_the_bound(tmp_path):
    write_mirror(tmp_path / "mirror", SMALL)
    bomb = gzip.compress(bytes(8 << 20))  # 8 MiB of zeros in a few KiB
    (tmp_path / "mirror" / "train-images-idx3-ubyte.gz").write_bytes(bomb)
    lines = [f"{hashlib.sha256((tmp_path / 'mirror' / f'{n}.gz').read_bytes()).hexdigest()}  {n}.gz" for n in SMALL]
    (tmp_path / "sums").write_text("\n".join(lines))
    with Mirror(tmp_path / "mirror") as mirror:
        with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: its content unpacked is over 1048576 bytes"):
            download(tmp_path / "data", [mirror.url], read_checksums(tmp_path / "sums"), log=lambda _: None,
                     limit=1 << 20)
    assert not list((tmp_path / "data" / "MNIST").glob(".download-*/*")), "nothing left of the unpacked file"


def test_an_unreadable_checksums_file_is_a_clear_data_error(tmp_path):
    with pytest.raises(DataError, match=r"^MNIST_CHECKSUMS: cannot read .*/absent \(No such file or directory\); "
                                        r"point it at a sha256sum-format file the pod can see$"):
        read_checksums(tmp_path / "absent")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DataError, match=r"^MNIST_CHECKSUMS: cannot read .*/binary"):
        read_checksums(tmp_path / "binary")


def test_corrupt_archive_is_refused(tmp_path):
    write_mirror(tmp_path / "mirror", SMALL)
    (tmp_path / "mirror" / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip at all")
    lines = [f"{hashlib.sha256((tmp_path / 'mirror' / f'{n}.gz').read_bytes()).hexdigest()}  {n}.gz" for n in SMALL]
    (tmp_path / "sums").write_text("\n".join(lines))
    with Mirror(tmp_path / "mirror") as mirror:
        with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz"):
            download(tmp_path / "data", [mirror.url], read_checksums(tmp_path / "sums"), log=lambda _: None)


def test_official_md5s_reject_other_files(tmp_path):
    write_mirror(tmp_path / "mirror", SMALL)
    with Mirror(tmp_path / "mirror") as mirror:
        with pytest.raises(DataError, match="md5 .* does not match the expected f68b3c2dcbeaaa9fbdd348bbdeb94873"):
            download(tmp_path / "data", [mirror.url], None, log=lambda _: None)


def test_truncated_idx_file_is_rejected(tmp_path):
    raw = write_raw(tmp_path, SMALL)
    data = (raw / "train-images-idx3-ubyte").read_bytes()
    (raw / "train-images-idx3-ubyte").write_bytes(data[:-100])
    with pytest.raises(DataError, match="truncated or corrupt"):
        check_idx(raw / "train-images-idx3-ubyte")
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        check_raw_files(raw)


def test_files_changed_after_download_fail_the_marker(tmp_path):
    checksums = read_checksums(write_mirror(tmp_path / "mirror", SMALL))
    with Mirror(tmp_path / "mirror") as mirror:
        download(tmp_path / "data", [mirror.url], checksums, log=lambda _: None)
    path = raw_dir(tmp_path / "data") / "t10k-labels-idx1-ubyte"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # same size, one bit flipped
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="no longer matches"):
        check_raw_files(raw_dir(tmp_path / "data"))


@pytest.mark.parametrize("planted", [
    "not json", '["a list"]', '{"sha256": "not a mapping"}',
    '{"sha256": {"../../../../../../dev/zero": "00"}}',  # a name it may not vouch for: never read (it never ends)
])
def test_a_marker_planted_on_the_volume_is_read_as_data(tmp_path, planted):
    raw = write_raw(tmp_path, SMALL)
    (raw / MARKER).write_text(planted)
    if "dev/zero" in planted:
        assert check_raw_files(raw)["train-images-idx3-ubyte"] == 64
    else:
        with pytest.raises(DataError, match=f"{MARKER}: not a marker of this worker's; remove it"):
            check_raw_files(raw)


def test_mismatched_image_and_label_counts_are_rejected(tmp_path):
    files = dict(SMALL)
    files["train-labels-idx1-ubyte"] = raw_files(synthetic_digits(10), synthetic_digits(1))["train-labels-idx1-ubyte"]
    with pytest.raises(DataError, match="train: 64 images but 10 labels"):
        check_raw_files(write_raw(tmp_path, files))


def test_real_digits_pass_the_structural_check(tmp_path):
    counts = check_raw_files(write_raw(tmp_path, dataset_files()))
    assert counts["train-images-idx3-ubyte"] == 8000 and counts["t10k-labels-idx1-ubyte"] == 2000


def test_the_worker_reads_exactly_what_torchvision_reads(tmp_path):
    from torchvision.datasets import MNIST

    from worker.mnist.data import MEAN, STD, load_split

    write_raw(tmp_path, SMALL)
    for train in (True, False):
        reference = MNIST(str(tmp_path), train=train, download=False)
        images, labels = load_split(tmp_path, train=train)
        assert torch.equal(labels, reference.targets.long())
        expected = ((reference.data.float() / 255 - MEAN) / STD).unsqueeze(1)
        torch.testing.assert_close(images, expected)
