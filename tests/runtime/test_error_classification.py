"""Which errors are the gang's communication failing (a victim: 75) and which are this rank's own (counted): by
torch.distributed's exception types, and for gloo by its transport's source location, never by loose words."""

import pytest
import torch.distributed as dist

from trainer_runtime.peer_failures import is_communication_error, is_timeout

GLOO = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/{}] {}"


@pytest.mark.parametrize("error, communication, timeout", [
    # what gloo raised here when a peer died, and when it stopped answering (a plain RuntimeError)
    (RuntimeError(GLOO.format("pair.cc:545", "Read error [127.0.0.1]:435: Connection reset by peer.")), True, False),
    (RuntimeError(GLOO.format("unbound_buffer.cc:78", "Timed out waiting 3000ms for recv operation")), True, True),
    (RuntimeError("Gloo connectFullMesh failed with " + GLOO.format("pair.cc:152", "timed out connecting")), True, True),
    # torch's own types: the store, the network, NCCL
    (dist.DistStoreError("wait timeout after 5000ms, keys: /y"), True, True),
    (dist.DistNetworkError("failed to connect to mnist-train-0.mnist-train:29500"), True, False),
    (dist.DistBackendError("NCCL communicator was aborted on rank 1"), True, False),
    # this rank's own failures, even when their text has the words the old check looked for
    (RuntimeError("CUDA out of memory"), False, False),
    (RuntimeError("the feature store timed out reading a peer's socket"), False, True),
    (ValueError("[x/gloo/transport/tcp/pair.cc:1] not a RuntimeError"), False, False),
])
def test_errors_are_classified_by_type_and_gloos_source_location(error, communication, timeout):
    assert is_communication_error(error) is communication
    assert is_timeout(error) is timeout


def _shell(tmp_path, error: BaseException, rank: int = 0) -> int:
    """Every built-in program's run shell around a training that fails with ``error``."""
    from types import SimpleNamespace

    from trainer_contract.checkpoint_layout import OPTIMIZER_STEP
    from trainer_runtime.distenv import DistEnv
    from trainer_runtime.run_shell import run_logged

    config = SimpleNamespace(output_dir=tmp_path, checkpoint_dir=tmp_path / "checkpoints", keep_checkpoints=2,
                             usage_log_seconds=0, checkpoint_storage_uri=None,
                             checkpoint_naming=OPTIMIZER_STEP)

    def train(*_):
        raise error

    return run_logged(config, DistEnv(rank=rank, world_size=2), train)


@pytest.mark.parametrize("error, rank, code", [
    (dist.DistNetworkError("failed to connect to sft-0.sft:29500"), 1, 75),  # a victim, not counted
    (RuntimeError(GLOO.format("pair.cc:545", "Read error [127.0.0.1]:435: Connection reset by peer.")), 0, 75),
    (RuntimeError(GLOO.format("unbound_buffer.cc:78", "Timed out waiting 3000ms for recv operation")), 0, 76),
    (RuntimeError(GLOO.format("unbound_buffer.cc:78", "Timed out waiting 3000ms for recv operation")), 1, 75),
])
def test_every_workload_exits_as_a_victim_when_a_peer_fails(tmp_path, capsys, error, rank, code):
    """The same mapping as MNIST's (75 a victim, 76 the leader giving up on a silent peer), with the line that says
    it; a transformer workload whose peer died used to exit as a plain failure, counted against the Job."""
    assert _shell(tmp_path, error, rank) == code
    said = "a peer stopped answering" if code == 76 else "lost contact with a peer"
    assert f"Rank {rank}: error: {said}" in capsys.readouterr().out


def test_a_failure_of_its_own_still_fails_the_rank(tmp_path):
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        _shell(tmp_path, RuntimeError("CUDA out of memory"))
