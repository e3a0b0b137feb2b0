"""Asynchronous checkpoints in real runs (torchrun, gloo): the loop goes on while a save is in flight, every
save completes before the model is written, and the files are the synchronous run's."""

import json

import pytest
import torch

from tests.mnist.launch import run, torchrun_command, worker_env

pytestmark = pytest.mark.slow

SETTINGS = dict(EPOCHS=2, BATCH_SIZE=32, LOG_INTERVAL=4, OMP_NUM_THREADS=1, TENSORBOARD="false")
# the first checkpoint's write takes 4 s more on rank 0 (the injector sleeps where the write begins)
SLOW_FIRST_WRITE = "sleep=4@checkpoint=1,rank=0"


def order_of(stdout: str) -> tuple[int, int]:
    """Line numbers of epoch 1's checkpoint written and of rank 0's first batch line of epoch 2."""
    lines = stdout.splitlines()
    written = next(i for i, line in enumerate(lines) if "checkpoint ckpt-e0001-s000000" in line and "written" in line)
    epoch_2 = next(i for i, line in enumerate(lines) if line.startswith("Rank 0: epoch: 2/2, batch:"))
    return written, epoch_2


@pytest.mark.parametrize("strategy", ["allreduce", "fsdp"])
def test_the_loop_goes_on_while_a_save_is_in_flight_and_the_save_completes_before_exit(tmp_path, small_dir,
                                                                                        strategy):
    outputs = {}
    for mode in ("true", "false"):
        out = tmp_path / f"async-{mode}"
        env = worker_env(small_dir, out, **SETTINGS, STRATEGY=strategy, CHECKPOINT_ASYNC=mode,
                         FAULT_INJECT=SLOW_FIRST_WRITE)
        result = run(torchrun_command(2), env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        written, epoch_2 = order_of(result.stdout)
        if mode == "true":
            assert epoch_2 < written, "epoch 2 waited for the write"
            assert "training waited" in result.stdout.splitlines()[written]
        else:
            assert written < epoch_2
        outputs[mode] = out
    for out in outputs.values():  # both checkpoints on disk and verified, then the model
        names = sorted(p.name for p in (out / "checkpoints").iterdir())
        assert names == [f"ckpt-e0001-s000000{suffix}" for suffix in ([".dcp"] if strategy == "fsdp" else [".pt"])] + \
            [f"ckpt-e0002-s000000{'.dcp' if strategy == 'fsdp' else '.pt'}"]
        assert json.loads((out / "model.json").read_text())["epochs"] == 2
    # the same training: the asynchronous run's model is the synchronous run's
    weights = [torch.load(out / "model.pt", weights_only=True) for out in outputs.values()]
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name


def test_a_kill_while_a_save_is_in_flight_resumes_from_the_previous_one_and_records_each_epoch_once(tmp_path,
                                                                                                   small_dir):
    from tests.mnist.launch import recorded_epochs

    out = tmp_path / "out"
    settings = dict(SETTINGS, EPOCHS=3)
    # epoch 2's save is held in the writer; the pod dies as epoch 3 trains, epoch 2 already in metrics.jsonl
    killed = run(torchrun_command(2), worker_env(small_dir, out, **settings,
                                                 FAULT_INJECT="sleep=30@checkpoint=2,rank=0; sigkill-pod@batch=3.2,rank=0"))
    assert killed.returncode != 0 and "checkpoint ckpt-e0002" not in killed.stdout, killed.stdout[-3000:]
    assert [p.name for p in (out / "checkpoints").iterdir() if not p.name.startswith(".")] == ["ckpt-e0001-s000000.pt"]
    resumed = run(torchrun_command(2), worker_env(small_dir, out, **settings))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "resuming from ckpt-e0001-s000000.pt" in resumed.stdout
    assert "metrics.jsonl: dropped 1 record(s) of epochs after 1" in resumed.stdout
    assert recorded_epochs(out) == [1, 2, 3]
