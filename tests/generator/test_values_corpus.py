"""The corpus under tests/corpus: every invalid file gives exactly its expected errors, every valid one renders."""

import json
from pathlib import Path

import pytest
import yaml

from tests.generator.helpers import run_main

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
INVALID = sorted(p for p in (CORPUS / "invalid").iterdir() if p.suffix in (".yaml", ".json"))
VALID = sorted(p for p in (CORPUS / "valid").iterdir() if p.suffix in (".yaml", ".json"))


def expected_errors(path: Path) -> list[str]:
    """'# error: ' lines in the file, or (JSON has no comments) the lines of a FILE.errors beside it."""
    sidecar = path.with_name(path.name + ".errors")
    if sidecar.exists():
        lines = sidecar.read_text(encoding="utf-8").splitlines()
    else:
        prefix = "# error: "
        lines = [line[len(prefix):] for line in path.read_bytes().decode("utf-8", errors="replace").splitlines()
                 if line.startswith(prefix)]
    return [line.replace("{file}", str(path)) for line in lines]


def test_corpus_is_not_empty():
    assert len(INVALID) >= 25 and len(VALID) >= 5


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_values_give_exactly_the_expected_errors(path):
    expected = expected_errors(path)
    assert expected, f"{path.name} declares no '# error:' line"
    result = run_main("--values", str(path))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    reported = [line.removeprefix("gen-manifests: error: ") for line in result.stderr.splitlines()]
    assert sorted(reported) == sorted(expected)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_values_write_nothing_under_output_dir(path, tmp_path):
    out = tmp_path / "out"
    result = run_main("--values", str(path), "--output-dir", str(out))
    assert result.exit_code == 2
    assert not out.exists()


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_values_render_the_four_objects_in_apply_order(path):
    result = run_main("--values", str(path))
    assert result.exit_code == 0, result.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout)]
    user = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    if user.get("shared_volume", {}).get("existing_claim"):
        assert kinds == ["ConfigMap", "Service", "Job"]
    else:
        assert kinds == ["PersistentVolumeClaim", "ConfigMap", "Service", "Job"]
