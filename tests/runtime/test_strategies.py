"""STRATEGY, PRECISION and TensorBoard in real runs: torchrun with gloo on 127.0.0.1.

Every strategy makes the same update (the summed loss's gradient over the global sample count), so in fp32 they
reach the same accuracy in the same epochs; fsdp's sharded checkpoints survive a kill, are verified, and reshard
to another world size at an epoch boundary; the final model.pt is a plain state dict under every strategy.
"""

import json
import os
import re
import shutil
import signal

import pytest
import torch

from tests.mnist.launch import rank_command, read_until, recorded_epochs, run, start, torchrun_command, worker_env
from worker.mnist.data import load_split
from worker.mnist.model import MnistCNN

pytestmark = pytest.mark.slow


def epoch_accuracies(output_dir):
    return [json.loads(line)["accuracy"] for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def plain_model(output_dir) -> MnistCNN:
    """model.pt into the model with torch.load alone: plain tensors, no torch.distributed."""
    weights = torch.load(output_dir / "model.pt", weights_only=True)
    assert all(type(tensor) is torch.Tensor for tensor in weights.values())
    model = MnistCNN()
    model.load_state_dict(weights)
    return model.eval()


# The strategies' runs compared: 2 epochs of the default recipe on half the digits, enough epochs for a
# one-cycle schedule to rise and fall (the defaults' 5 epochs and their accuracy: tests/mnist/test_training.py).
COMPARED_SETTINGS = dict(EPOCHS=2, TRAIN_SAMPLES=4000)


@pytest.fixture(scope="module")
def strategy_runs(digits_dir, tmp_path_factory):
    """The same settings on 2 processes, once per strategy."""
    runs = {}
    for strategy in ("allreduce", "ddp", "fsdp"):
        out = tmp_path_factory.mktemp(strategy)
        result = run(torchrun_command(2), worker_env(digits_dir, out, STRATEGY=strategy, **COMPARED_SETTINGS),
                     timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        runs[strategy] = (out, result.stdout)
    return runs


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_each_strategy_reaches_allreduces_accuracy_in_the_same_epochs(strategy_runs, strategy, digits_dir):
    reference, _ = strategy_runs["allreduce"]
    out, log = strategy_runs[strategy]
    assert f"strategy {strategy}, precision fp32" in log
    ours, theirs = epoch_accuracies(out), epoch_accuracies(reference)
    assert len(ours) == len(theirs) == COMPARED_SETTINGS["EPOCHS"]
    # the same update in fp32: only the order of the float sums differs
    assert max(abs(a - b) for a, b in zip(ours, theirs)) <= 0.005, (ours, theirs)
    assert ours[-1] >= 0.9, ours  # it learned (95.9% here): a broken strategy matching a broken allreduce would not
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {m["strategy"] for m in metrics} == {strategy} and all(m["backward_ms_per_step"] > 0 for m in metrics)
    # model.pt holds the whole model: evaluated here it gives the accuracy the run reported
    images, labels = load_split(digits_dir, train=False)
    with torch.no_grad():
        accuracy = (plain_model(out)(images).argmax(1) == labels).float().mean().item()
    assert accuracy == pytest.approx(json.loads((out / "model.json").read_text())["accuracy"], abs=1e-6)


def test_fsdp_checkpoints_are_directories_of_verified_shards(strategy_runs):
    out, _ = strategy_runs["fsdp"]
    newest = out / "checkpoints" / "ckpt-e0002-s000000.dcp"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "ckpt-e0001-s000000.dcp", "ckpt-e0002-s000000.dcp"]
    manifest = json.loads((newest / "manifest.json").read_text())
    assert set(manifest["files"]) == {".metadata", "__0_0.distcp", "__1_0.distcp"}  # each rank its shard
    assert manifest["meta"]["world_size"] == 2 and manifest["meta"]["strategy"] == "fsdp"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_bf16_trains_and_saves_an_fp32_model(small_dir, tmp_path, strategy):
    out = tmp_path / "out"
    result = run(torchrun_command(2), worker_env(small_dir, out, STRATEGY=strategy, PRECISION="bf16", EPOCHS=1,
                                                 TRAIN_SAMPLES=256, OMP_NUM_THREADS=1))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"strategy {strategy}, precision bf16" in result.stdout
    weights = torch.load(out / "model.pt", weights_only=True)
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}  # master weights stay fp32
    assert json.loads((out / "model.json").read_text())["config"]["precision"] == "bf16"


@pytest.mark.parametrize("settings, message", [
    (dict(PRECISION="fp16"), "PRECISION: fp16 needs a CUDA GPU (its gradient scaler runs on CUDA only) and this "
                             "process runs on cpu: use bf16 or fp32 here"),
    (dict(STRATEGY="zero3"), "STRATEGY: 'zero3' must be one of allreduce, ddp, fsdp, hsdp"),
])
def test_unsupported_choices_exit_78_naming_the_variable(small_dir, tmp_path, settings, message):
    out = tmp_path / "out"
    result = run(torchrun_command(2), worker_env(small_dir, out, **settings), timeout=120)
    output = result.stdout + result.stderr
    assert message in output
    assert not out.exists() or not any(out.iterdir())  # nothing written


# The uninterrupted run that the kill-and-resume tests end against: 3 epochs, 2 processes.
RESUME_SETTINGS = dict(EPOCHS=3, BATCH_SIZE=32, OMP_NUM_THREADS=1, LOG_INTERVAL=1000)


@pytest.fixture(scope="module")
def uninterrupted(small_dir, tmp_path_factory):
    """The uninterrupted run's output directory per strategy, each run once for the whole module."""
    runs = {}

    def output_dir(strategy: str):
        if strategy not in runs:
            out = tmp_path_factory.mktemp(f"uninterrupted-{strategy}")
            result = run(torchrun_command(2), worker_env(small_dir, out, STRATEGY=strategy, **RESUME_SETTINGS))
            assert result.returncode == 0, result.stdout[-3000:]
            runs[strategy] = out
        return runs[strategy]

    return output_dir


def test_fsdp_killed_run_falls_back_past_a_damaged_shard_and_matches_the_uninterrupted_run(tmp_path, small_dir,
                                                                                           uninterrupted):
    settings = dict(STRATEGY="fsdp", **RESUME_SETTINGS)

    # the pod dies (torchrun and both ranks, SIGKILL) once epoch 2's checkpoint is on disk, as epoch 3 begins
    out = tmp_path / "interrupted"
    killed = run(torchrun_command(2), worker_env(small_dir, out, FAULT_INJECT="sigkill-pod@written=2,rank=0",
                                                 **settings))
    assert killed.returncode != 0 and "checkpoint ckpt-e0002-s000000.dcp written" in killed.stdout, killed.stdout
    checkpoints = out / "checkpoints"
    shard = checkpoints / "ckpt-e0002-s000000.dcp" / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:1000])  # rank 1's shard of the newest checkpoint is damaged
    (checkpoints / ".tmp-ckpt-e0003-s000000.dcp").mkdir(exist_ok=True)  # as a kill during a write leaves
    resumed = run(torchrun_command(2), worker_env(small_dir, out, **settings))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert ("skipping checkpoint ckpt-e0002-s000000.dcp: __1_0.distcp does not match its checksum"
            in resumed.stdout)
    assert "resuming from ckpt-e0001-s000000.dcp" in resumed.stdout
    assert "removed .tmp-ckpt-e0003-s000000.dcp" in resumed.stdout
    assert "Rank 0: epoch: 1/3" not in resumed.stdout and "Rank 0: epoch: 2/3" in resumed.stdout
    reference_model, resumed_model = plain_model(uninterrupted("fsdp")), plain_model(out)
    for (name, tensor), other in zip(reference_model.state_dict().items(), resumed_model.state_dict().values()):
        torch.testing.assert_close(other, tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_fsdp_sigterm_writes_a_sharded_checkpoint_mid_epoch_and_the_rerun_continues(tmp_path, small_dir):
    settings = dict(STRATEGY="fsdp", EPOCHS=2, BATCH_SIZE=8, LOG_INTERVAL=1, OMP_NUM_THREADS=1)
    out = tmp_path / "out"
    process = start(torchrun_command(2), worker_env(small_dir, out, **settings))
    seen = []
    assert read_until(process, "Rank 1: epoch: 1/2, batch: 5/64", 120, seen), "".join(seen)
    os.kill(process.pid, signal.SIGTERM)  # to torchrun, as the kubelet does
    output = "".join(seen) + process.communicate(timeout=60)[0]
    assert process.returncode != 0, output
    (checkpoint,) = [p.name for p in (out / "checkpoints").iterdir()]
    step = int(re.fullmatch(r"ckpt-e0000-s(\d{6})\.dcp", checkpoint).group(1))
    assert 5 <= step < 64
    resumed = run(torchrun_command(2), worker_env(small_dir, out, **settings))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"resuming from {checkpoint}" in resumed.stdout
    assert f"Rank 0: epoch: 1/2, batch: {step + 1}/64" in resumed.stdout
    assert f"Rank 0: epoch: 1/2, batch: {step}/64" not in resumed.stdout
    assert recorded_epochs(out) == [1, 2]


@pytest.mark.parametrize("first, second", [(2, 1), (1, 2)])
def test_fsdp_resumes_at_an_epoch_boundary_with_another_world_size(tmp_path, small_dir, first, second):
    settings = dict(STRATEGY="fsdp", **RESUME_SETTINGS)
    out = tmp_path / "out"
    command = torchrun_command(first) if first > 1 else rank_command()
    killed = run(command, worker_env(small_dir, out, FAULT_INJECT="sigkill@written=1,rank=0", **settings))
    assert killed.returncode != 0 and "checkpoint ckpt-e0001-s000000.dcp written" in killed.stdout, killed.stdout
    manifest = json.loads((out / "checkpoints" / "ckpt-e0001-s000000.dcp" / "manifest.json").read_text())
    assert manifest["meta"]["world_size"] == first
    first_loss = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["loss"]

    command = torchrun_command(second) if second > 1 else rank_command()
    resumed = run(command, worker_env(small_dir, out, **settings))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "resuming from ckpt-e0001-s000000.dcp" in resumed.stdout
    assert f"world size {second}" in resumed.stdout or second == 1
    assert recorded_epochs(out) == [1, 2, 3]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["world_size"] for r in records] == [first, second, second]
    # it continued from the trained weights (resharded), not from a fresh model: epoch 2 starts where 1 ended
    assert records[1]["loss"] < 0.8 * first_loss
    plain_model(out)


@pytest.fixture(scope="module")
def killed_after_epoch_1(small_dir, tmp_path_factory):
    """Per strategy, the output of a run under it whose pod died (torchrun and both ranks, SIGKILL) once epoch 1's
    checkpoint was written; made once for the whole module, each test resumes a copy of it."""
    runs = {}

    def output_dir(strategy: str):
        if strategy not in runs:
            out = tmp_path_factory.mktemp(f"killed-{strategy}") / "out"
            env = worker_env(small_dir, out, STRATEGY=strategy, FAULT_INJECT="sigkill-pod@written=1,rank=0",
                             **RESUME_SETTINGS)
            killed = run(torchrun_command(2), env)
            assert killed.returncode != 0, killed.stdout
            runs[strategy] = out
        return runs[strategy]

    return output_dir


@pytest.mark.parametrize("first, second", [("fsdp", "allreduce"), ("allreduce", "fsdp"), ("fsdp", "ddp")])
def test_a_checkpoint_resumes_under_another_strategy(tmp_path, small_dir, uninterrupted, killed_after_epoch_1, first,
                                                     second):
    settings = RESUME_SETTINGS
    out = shutil.copytree(killed_after_epoch_1(first), tmp_path / "out")  # killed under ``first`` after epoch 1
    resumed = run(torchrun_command(2), worker_env(small_dir, out, STRATEGY=second, **settings))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    suffix = ".dcp" if first == "fsdp" else ".pt"
    assert f"resuming from ckpt-e0001-s000000{suffix}" in resumed.stdout
    assert recorded_epochs(out) == [1, 2, 3]
    # the same update under every strategy: the resumed run ends where the uninterrupted one did
    for (name, tensor), other in zip(plain_model(uninterrupted(first)).state_dict().items(),
                                     plain_model(out).state_dict().values()):
        torch.testing.assert_close(other, tensor, rtol=1e-3, atol=1e-4, msg=name)


def test_hsdp_on_two_nodes_writes_sharded_checkpoints_and_resumes_from_one_as_the_uninterrupted_run_ends(small_dir,
                                                                                                        tmp_path):
    """STRATEGY=hsdp on 2 launchers ("nodes") of 2 processes: the CNN sharded within each node, replicated across
    them, its checkpoints written by every rank through torch.distributed.checkpoint; a start from the first
    epoch's checkpoint ends where the uninterrupted run did."""
    from tests.mnist.launch import run_workload_on_nodes

    settings = {**worker_env(small_dir, tmp_path / "out", STRATEGY="hsdp", EPOCHS=2, OMP_NUM_THREADS=1)}
    nodes = run_workload_on_nodes("worker", settings, tmp_path, small_dir, tmp_path / "out")
    for node in nodes:
        assert node.returncode == 0, node.stdout[-3000:] + node.stderr[-3000:]
    assert "world size 4 (2 nodes x 2)" in nodes[0].stdout and "strategy hsdp" in nodes[0].stdout
    checkpoints = tmp_path / "out" / "checkpoints"
    assert sorted(path.name for path in checkpoints.iterdir()) == ["ckpt-e0001-s000000.dcp", "ckpt-e0002-s000000.dcp"]
    uninterrupted = (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    final = torch.load(tmp_path / "out" / "model.pt", weights_only=True)
    # as if the second epoch's end never happened: its checkpoint and the model gone
    shutil.rmtree(checkpoints / "ckpt-e0002-s000000.dcp")
    (tmp_path / "out" / "model.pt").unlink()
    again = run_workload_on_nodes("worker", settings, tmp_path, small_dir, tmp_path / "out")
    assert all(node.returncode == 0 for node in again), again[0].stdout[-3000:]
    assert "Rank 0: resuming from ckpt-e0001-s000000.dcp" in again[0].stdout, again[0].stderr[-2000:]
    resumed = torch.load(tmp_path / "out" / "model.pt", weights_only=True)
    assert all(torch.allclose(resumed[key], final[key], atol=1e-6) for key in final)
    assert [json.loads(line)["loss"] for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()] == \
        [json.loads(line)["loss"] for line in uninterrupted]
