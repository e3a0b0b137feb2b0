"""Which errors are the gang's communication failing (a victim: 75) and which are this rank's own (counted): by
torch.distributed's exception types, and for gloo by its transport's source location, never by loose words."""

import pytest
import torch.distributed as dist

from worker.mnist.train import _is_communication_error, _is_timeout

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
    assert _is_communication_error(error) is communication
    assert _is_timeout(error) is timeout
