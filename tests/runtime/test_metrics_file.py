"""metrics.jsonl's one writer (trainer_runtime/metrics_file.py): a resume keeps what its checkpoint holds, whatever
else a kill or the volume left in the file, for MNIST's epochs and the transformer loop's steps alike."""

import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from trainer_runtime import metrics_file
from trainer_runtime.run_log import RunLog

records = st.lists(st.fixed_dictionaries({"step": st.integers(0, 50), "loss": st.floats(0, 10)}), max_size=12)
garbage = st.lists(st.one_of(st.text(max_size=30).filter(lambda text: "\n" not in text and "\r" not in text),
                             st.just('{"step": 4, "lo'), st.just('{"step": "NaN"}'), st.just("[1, 2]"),
                             st.just('{"step": Infinity}'), st.just("[" * 5000)), max_size=4)


@settings(max_examples=60, deadline=None)
@given(records=records, garbage=garbage, last=st.integers(0, 50))
@example(records=[], garbage=["\x1e"], last=0)  # a separator to str.splitlines, not to the file: one line, not two
def test_a_trim_keeps_exactly_the_records_up_to_the_checkpoint_and_never_fails(tmp_path_factory, records, garbage,
                                                                               last):
    directory = tmp_path_factory.mktemp("run")
    lines = [json.dumps(record) for record in records] + garbage
    (directory / metrics_file.METRICS_FILE).write_text("".join(line + "\n" for line in lines))
    dropped = metrics_file.keep_up_to(directory, "step", last)
    kept = [json.loads(line) for line in (directory / metrics_file.METRICS_FILE).read_text().splitlines()]
    assert kept == [record for record in records if record["step"] <= last]
    assert dropped == len(lines) - len(kept)


def test_no_file_and_nothing_to_drop_leave_the_volume_as_it_was(tmp_path):
    assert metrics_file.keep_up_to(tmp_path, "epoch", 3) == 0 and not list(tmp_path.iterdir())
    metrics_file.append(tmp_path, {"epoch": 1})
    before = (tmp_path / metrics_file.METRICS_FILE).stat()
    assert metrics_file.keep_up_to(tmp_path, "epoch", 3) == 0
    assert (tmp_path / metrics_file.METRICS_FILE).stat().st_ino == before.st_ino  # not rewritten


def test_a_resumed_transformer_run_drops_a_torn_line_instead_of_failing(tmp_path, capsys):
    """A kill mid-append tore the last line; the resume from step 20 keeps steps 10 and 20 and says what went."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 10}\n{"step": 20}\n{"step": 30}\n{"step": 4')
    log = RunLog(0, tmp_path, log_interval=10, tensorboard=False)
    log.start(20, 100)
    log.record({"step": 30, "loss": 0.5}, {}, 30)
    log.close()
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20, 30]
    assert "Rank 0: metrics.jsonl: dropped 2 record(s) after step 20, which this start trains again" in \
        capsys.readouterr().out
