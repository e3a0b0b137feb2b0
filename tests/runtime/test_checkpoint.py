"""Single-file checkpoints through the manager: atomic, verified before loading, rotated; damaged ones are skipped,
never loaded; a save restores into a fresh strategy exactly."""

import pytest
import torch
import torch.nn.functional as F

from trainer_contract import atomic
from trainer_contract import checkpoint_layout as layout
from trainer_contract.checkpoint_layout import EPOCH_STEP, Position
from trainer_runtime import strategies
from trainer_runtime.checkpoints import single_file
from trainer_runtime.checkpoints.manager import CheckpointManager, load_newest
from trainer_runtime.checkpoints.state import TrainingState
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from worker.mnist.model import MnistCNN


def strategy(seed=0):
    torch.manual_seed(seed)
    parallel = strategies.build("allreduce", MnistCNN(), DistEnv(), torch.device("cpu"), "fp32")
    parallel.attach(torch.optim.Adam(parallel.module.parameters(), lr=0.01))
    return parallel


def trained(steps=1, seed=0):
    parallel = strategy(seed)
    for _ in range(steps):
        parallel.zero_grad()
        loss = F.cross_entropy(parallel.model(torch.randn(4, 1, 28, 28)), torch.tensor([0, 1, 2, 3]), reduction="sum")
        parallel.backward(loss, 4, 4, False)
        parallel.step()
    return parallel


def manager(directory, keep=5, lines=None, every=1, epochs=9, rank=0, asynchronous=False):
    run_store = CheckpointStore(directory, EPOCH_STEP, keep=keep, log=(lines.append if lines is not None else print))
    return CheckpointManager(run_store, every=every, epochs=epochs, rank=rank, sharded_format=False,
                             asynchronous=asynchronous)


def state(epoch, step=0, **fields):
    return TrainingState(Position(epoch, step), steps_per_epoch=10, world_size=1, **fields)


def test_a_save_restores_into_a_fresh_strategy_with_its_state(tmp_path):
    saved = trained(steps=2)
    lines = []
    manager(tmp_path, lines=lines).save(state(1, result={"accuracy": 0.5}, epoch_loss_sum=3.0), saved)
    assert lines and lines[0].startswith("checkpoint ckpt-e0001-s000000.pt written (")
    found = manager(tmp_path).load_newest()
    assert found.path.name == "ckpt-e0001-s000000.pt"
    assert found.state == state(1, result={"accuracy": 0.5}, epoch_loss_sum=3.0)
    fresh = strategy(seed=1)
    CheckpointManager.restore(found, fresh)
    for name, tensor in saved.module.state_dict().items():
        assert torch.equal(fresh.module.state_dict()[name], tensor), name
    for old, new in zip(saved.module.parameters(), fresh.module.parameters(), strict=True):
        assert torch.equal(saved.optimizer.state[old]["exp_avg"], fresh.optimizer.state[new]["exp_avg"])
    assert fresh.grads.is_intact()


def test_only_the_last_few_are_kept_newest_first(tmp_path):
    parallel = strategy()
    for epoch in range(1, 6):
        manager(tmp_path, keep=2).save(state(epoch), parallel)
    assert [p.name for _, p in layout.list_checkpoints(tmp_path)] == ["ckpt-e0005-s000000.pt",
                                                                      "ckpt-e0004-s000000.pt"]


def test_mid_epoch_positions_order_after_their_epoch_start(tmp_path):
    parallel = strategy()
    manager(tmp_path).save(state(2), parallel)
    manager(tmp_path).save(state(2, 17), parallel)
    assert load_newest(tmp_path).path.name == "ckpt-e0002-s000017.pt"


def test_truncated_zeroed_and_garbage_files_are_skipped(tmp_path):
    manager(tmp_path).save(state(1), strategy())
    good = (tmp_path / "ckpt-e0001-s000000.pt").read_bytes()
    damaged = {
        Position(2, 0): good[: len(good) // 2],  # truncated
        Position(3, 0): b"",  # zero bytes
        Position(4, 0): b"\0" * len(good),  # zeroed
        Position(5, 0): good[:-10] + b"x" * 10,  # corrupt tail, same length
        Position(6, 0): single_file.encode({"position": {"epoch": 6, "step": 0}}),  # verifies, lacks the state
    }
    for position, data in damaged.items():
        (tmp_path / position.filename()).write_bytes(data)
    messages = []
    found = load_newest(tmp_path, log=messages.append)
    assert found.path.name == "ckpt-e0001-s000000.pt" and found.state.position == Position(1, 0)
    assert len(messages) == 5 and all(m.startswith("skipping checkpoint") for m in messages)


def test_a_crash_mid_write_leaves_only_a_temporary_that_is_never_read(tmp_path, monkeypatch):
    parallel = strategy()
    manager(tmp_path).save(state(1), parallel)

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", crash)
    try:
        manager(tmp_path).save(state(2), parallel)
    except OSError:
        pass
    monkeypatch.undo()
    assert [p.name for _, p in layout.list_checkpoints(tmp_path)] == ["ckpt-e0001-s000000.pt"]
    (tmp_path / ".tmp-ckpt-e0002-s000000.pt.abc").write_bytes(b"half")  # as a SIGKILL mid-write leaves it
    lines = []
    manager(tmp_path, lines=lines).store.remove_stale_temporaries()
    assert lines == ["removed .tmp-ckpt-e0002-s000000.pt.abc, left by an interrupted checkpoint write"]
    assert load_newest(tmp_path).path.name == "ckpt-e0001-s000000.pt"


def test_no_checkpoint_means_none(tmp_path):
    assert load_newest(tmp_path / "missing") is None


def test_an_earlier_versions_record_reads_with_defaults():
    old = {"position": {"epoch": 2, "step": 0}, "steps_per_epoch": 30, "world_size": 2}  # before config/scaler
    assert TrainingState.from_record(old) == TrainingState(Position(2, 0), 30, 2)
    assert TrainingState.from_record(state(1, 5, config={"epochs": "3"}).to_record()) == state(1, 5, config={"epochs": "3"})


def test_the_cadence_saves_every_n_epochs_the_last_and_on_a_stop(tmp_path):
    every_two = manager(tmp_path, keep=3, every=2, epochs=5)
    assert [e for e in range(1, 6) if every_two.due(e, stopping=False)] == [2, 4, 5]
    never = manager(tmp_path, keep=3, every=0, epochs=5)
    assert [e for e in range(1, 6) if never.due(e, stopping=False)] == [5] and never.due(1, stopping=True)


def test_only_rank_0_writes_a_single_file(tmp_path):
    manager(tmp_path, keep=3, epochs=5, rank=1).save(
        state(1), strategy())
    assert list(tmp_path.iterdir()) == []


def test_an_asynchronous_save_lets_training_change_the_model_while_the_write_goes_on(tmp_path):
    """The training waits only while the state is copied: the write runs beside it (held here by a slow hook
    on the writer's side), a step taken meanwhile does not reach the checkpoint, and wait() completes it."""
    import threading
    import time

    from trainer_contract import hooks

    release = threading.Event()
    writer_threads = []

    def slow_write(name, **context):
        if name == "checkpoint":
            writer_threads.append(threading.current_thread().name)
            release.wait(30)

    parallel = trained(steps=1)
    before = {name: tensor.clone() for name, tensor in parallel.module.state_dict().items()}
    lines = []
    async_manager = manager(tmp_path, lines=lines, asynchronous=True)
    hooks.install(slow_write)
    try:
        started = time.perf_counter()
        async_manager.save(state(1), parallel)
        assert time.perf_counter() - started < 5  # returned while the write is held
        with torch.no_grad():  # the training goes on, changing the tensors in place
            for parameter in parallel.module.parameters():
                parameter.add_(1.0)
        assert not list(tmp_path.glob("ckpt-*"))
        release.set()
        async_manager.wait()
    finally:
        hooks.install(None)
    assert writer_threads == ["checkpoint-write"]
    assert lines and lines[0].startswith("checkpoint ckpt-e0001-s000000.pt written (") and "training waited" in lines[0]
    found = manager(tmp_path).load_newest()
    for name, tensor in found.tensors["model"].items():
        assert torch.equal(tensor, before[name]), name  # the state at save(), not after the step


def test_a_failed_asynchronous_write_is_raised_to_the_training_at_the_next_save(tmp_path):
    from trainer_contract import hooks

    def failing(name, **context):
        if name == "checkpoint":
            raise OSError(28, "No space left on device")

    async_manager = manager(tmp_path, asynchronous=True)
    hooks.install(failing)
    try:
        async_manager.save(state(1), strategy())
        with pytest.raises(OSError, match="No space left on device"):
            async_manager.save(state(2), strategy())
    finally:
        hooks.install(None)
    assert not list(tmp_path.glob("ckpt-*"))


def test_the_staging_copy_reuses_its_buffers_and_remakes_them_when_the_state_changes_shape():
    from trainer_runtime.checkpoints.staging_buffers import StagingBuffers

    staging = StagingBuffers()
    weights = torch.ones(3)
    first = staging.copy({"w": weights, "step": 1, "name": "a"})
    weights.add_(1)  # the training changes the tensor in place: the copy keeps the value it took
    assert torch.equal(first["w"], torch.ones(3)) and first["step"] == 1
    second = staging.copy({"w": weights, "step": 2, "name": "b"})
    assert second["w"].data_ptr() == first["w"].data_ptr()  # copied into, not allocated again
    assert torch.equal(second["w"], torch.full((3,), 2.0)) and second["step"] == 2 and second["name"] == "b"
    third = staging.copy({"w": torch.zeros(4), "step": 3, "name": "c"})
    assert third["w"].shape == (4,) and third["w"].data_ptr() != second["w"].data_ptr()
