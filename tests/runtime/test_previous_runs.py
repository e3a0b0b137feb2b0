"""trainer_runtime.previous_runs: RESUME=false sets the run in OUTPUT_DIR aside, whole, for every program."""

from pathlib import Path

from trainer_runtime import previous_runs
from trainer_runtime.pretrained.export import RUN_FILES


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_pretrained_runs_files_move_whole_and_what_the_pod_keeps_stays(tmp_path):
    moved_names = ["summary.json", "bert_classifier_trained/model.safetensors", "metrics.jsonl",
                   "checkpoints/step-00000032.ckpt", "tensorboard/events.out", ".starts/1.json"]
    for name in moved_names:
        write(tmp_path / name, name)
    kept = [write(tmp_path / "logs" / "usage-rank0.log"), write(tmp_path / ".gang" / "attempt")]
    target = previous_runs.set_aside(tmp_path, RUN_FILES, now=0)
    assert target == tmp_path / "previous-runs" / "19700101T000000Z"
    assert all((target / name).read_text() == name for name in moved_names)
    assert not any((tmp_path / name).exists() for name in moved_names)
    assert all(path.exists() for path in kept)  # the pod's usage logs and the launchers' ledger are not the run's


def test_nothing_to_set_aside_and_two_in_one_second_apart(tmp_path):
    assert previous_runs.set_aside(tmp_path, RUN_FILES, now=0) is None
    write(tmp_path / "summary.json", "first")
    first = previous_runs.set_aside(tmp_path, RUN_FILES, now=0)
    write(tmp_path / "summary.json", "second")
    second = previous_runs.set_aside(tmp_path, RUN_FILES, now=0)
    assert first != second and (first / "summary.json").read_text() == "first"
    assert (second / "summary.json").read_text() == "second"
