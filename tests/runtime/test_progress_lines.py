"""What a person reads while a run goes and after a pod ends: durations, the ETA, the pod's termination message."""

import pytest

import worker.launch  # noqa: F401  (the entry registers the built-in worker's run with the launcher)
from trainer_contract import exit_codes
from trainer_contract.launcher import write_termination_message
from trainer_contract.progress import format_duration
from trainer_launcher import launch
from trainer_runtime.progress import Progress


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (42.4, "42 s"), (59.6, "1 min 00 s"), (185, "3 min 05 s"),
                                           (7620, "2 h 07 min")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert format_duration(seconds) == text


def test_the_eta_counts_only_the_steps_this_start_trained(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("trainer_runtime.run_log.time.monotonic", lambda: clock[0])
    progress = Progress(0, tmp_path, epochs=5, log_interval=10)
    progress.begin(epoch=1, step=50, steps_per_epoch=100)  # resumed in the middle of epoch 2
    clock[0] += 30.0  # 150 steps (the rest of epoch 2, epoch 3) in 30 s: 0.2 s a step
    assert progress.epoch_timing(3) == "30 s elapsed, about 40 s left"  # 200 steps to go
    clock[0] += 40.0
    assert progress.epoch_timing(5) == "1 min 10 s elapsed, done"


def test_every_exit_code_of_the_worker_has_a_meaning_and_an_action():
    named = {value for name, value in vars(exit_codes).items() if name.isupper() and isinstance(value, int)}
    assert named == {item.code for item in exit_codes.CODES}
    assert all(item.meaning and item.action for item in exit_codes.CODES)
    assert exit_codes.meaning(137).startswith("killed (SIGKILL") and exit_codes.meaning(134) == "killed by signal 6"


def test_the_termination_message_is_written_only_where_the_kubelet_provides_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "_said", [])
    launch.say("worker rank 1 failed first with exit code 78; the pod exits 78")
    args = launch.parse_args(["--standalone", "--nproc-per-node=1", "-m", "worker"])
    message = launch.termination_message(78, args)
    assert message == ("exit 78: bad configuration: retrying cannot help, the Job fails; worker rank 1 failed first "
                       "with exit code 78; the pod exits 78")
    provided = tmp_path / "termination-log"
    provided.write_text("")
    write_termination_message(message, provided)
    assert provided.read_text() == message + "\n"
    missing = tmp_path / "dev" / "termination-log"
    write_termination_message(message, missing)
    assert not missing.exists()


def test_a_completed_pods_message_is_the_runs_result(tmp_path, monkeypatch):
    (tmp_path / "model.pt").write_bytes(b"weights")
    (tmp_path / "model.json").write_text('{"accuracy": 0.98125, "epochs": 3, "config": {}}')
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path))
    args = launch.parse_args(["--standalone", "--nproc-per-node=1", "-m", "worker"])
    assert launch.termination_message(0, args) == "exit 0: completed: test accuracy 0.9812 after 3 epochs"


def test_a_rank_waiting_for_the_data_says_so_while_it_waits(monkeypatch):
    import json
    import threading

    import torch.distributed as dist

    from trainer_runtime import prepared_once

    monkeypatch.setattr(prepared_once, "WAIT_REPORT_SECONDS", 0.2)
    store = dist.HashStore()  # the store the process group's ranks share, in one process
    timer = threading.Timer(0.9, store.set, args=("verdict", json.dumps({"ok": True, "source": "mnist"})))
    timer.start()
    lines = []
    preparation = prepared_once.Preparation("prepare the data", "preparing the data", "verdict", "global rank 0", 60,
                                            "DOWNLOAD_TIMEOUT")
    assert prepared_once.wait_for(store, preparation, lines.append) == {"ok": True, "source": "mnist"}
    timer.join()
    assert 3 <= len(lines) <= 5, lines
    assert lines[0] == "waiting for global rank 0 to prepare the data: 0 s of DOWNLOAD_TIMEOUT=60 s"


def test_a_start_keeps_only_the_epochs_its_checkpoint_holds(tmp_path):
    """Epoch 3 was recorded while its asynchronous save was in flight and the pod died: resumed from epoch 2's
    checkpoint, epoch 3 is trained again and must not be in metrics.jsonl twice (a torn last line goes too)."""
    import json

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"epoch": e, "loss": 1.0 / e}) + "\n"
                                                    for e in (1, 2, 3)) + '{"epoch": 4, "lo')
    lines = []
    progress = Progress(0, tmp_path, epochs=5, log_interval=10)
    progress.log = lines.append
    progress.keep_epochs_up_to(2)
    assert [json.loads(line)["epoch"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert lines == ["metrics.jsonl: dropped 2 record(s) of epochs after 2, which this start trains again"]
    Progress(1, tmp_path, epochs=5, log_interval=10).keep_epochs_up_to(0)  # only rank 0 touches the file
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
