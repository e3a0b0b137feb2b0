"""This process's part in its replica group (trainer_contract/replica_groups.py) through torchft's Manager: the
step's quorum of groups, this rank's share of the step's examples, the gradients summed across the groups that
step, and whether the step commits.

The quorum is taken at the start of every step, not beside its forward pass (torchft's use_async_quorum=False), so
that a step's examples are shared by exactly the groups that step: a step's examples are fixed by its number
whatever the quorum (trainer_contract.replica_groups.share_of), the gradient is their sum over every group divided
by their count, and a step that does not commit (a group failed in it) is taken again by the next quorum with the
same examples. So no example is skipped or seen twice across a fault or a resize, and the learning follows the
committed steps alone, as the uninterrupted run's. A group that joins (a new pod, a restarted one) takes the
weights, the optimizer's state and the step from a peer during that quorum (torchft's checkpoint transport), not
from a checkpoint.

Within a group, its processes first sum their gradients on the group's own process group (the training's), then
the group's ranks of the same local rank sum them across the groups on torchft's process group, which it
reconfigures at each new quorum. Under fsdp (hsdp: a group is one node) each rank holds a shard of the model, the
gradients reduce-scattered within the group, and only its shard crosses the groups, with the same rank's of every
other group: hybrid sharding whose replicate dimension is the groups. A joining group's rank takes its shard (the
model's and AdamW's, as DTensors) from the same rank of a peer.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from trainer_contract.replica_groups import ReplicaGroups, share_of
from trainer_runtime.distenv import DistEnv
from trainer_runtime.metrics import live
from trainer_runtime.stop import agreed

# The job's model is written once, by the last step's first group: under a Job the others wait for the Job to
# complete with that group's success (its successPolicy then ends them: SIGTERM ends the wait), and the group in
# place p of that step's quorum writes it in the first's stead after p times this, where the Job has not ended it by
# then and no model is written (the writer lost for good). So one group of 1,024 writes a 70B model, not every one.
SUCCESSION_SECONDS = 600.0

# A collective across the groups, a peer's answer about the commit, a recovery's transfer: a dead peer's gloo
# connection closes at once, so this bounds only a peer that hangs (a node lost without a reset).
TIMEOUT = timedelta(seconds=60)
# A group alone, below MIN_REPLICAS, waits this long for the others before it fails (its launcher restarts it).
QUORUM_TIMEOUT = timedelta(minutes=15)
# A Lighthouse that is gone (its pod recreated) is asked again about once a second for as long: torchft's manager
# waits QUORUM_TIMEOUT / (retries + 1) between tries; without retries a quorum asked of a Lighthouse that restarted
# would wait out QUORUM_TIMEOUT.
QUORUM_RETRIES = int(QUORUM_TIMEOUT.total_seconds())


class ReplicaGroup:
    """The Manager of this rank's group; ``state()``/``load(state)`` give and take what a joining group recovers
    from a peer (the model, the optimizer, the schedule); ``step``: where this group starts (a checkpoint's)."""

    def __init__(self, groups: ReplicaGroups, env: DistEnv, device: torch.device, state: Callable[[], dict],
                 load: Callable[[dict], None], log: Callable[[str], None], step: int = 0):
        os.environ.setdefault("RUST_LOG", "warn")  # torchft's servers say each quorum at info: ours say changes
        import torchft  # an extra (indexed-trainer[replicas]); the caller checked it is there

        _say_in_one_line(logging.getLogger("torchft"), env.rank)
        # torchft's transport reads a recovered state from a bytes buffer; its tensors are copied on load
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        self.groups, self.env, self.log = groups, env, log
        from torchft.checkpointing import HTTPTransport

        cross = torchft.ProcessGroupNCCL(timeout=TIMEOUT) if device.type == "cuda" else \
            torchft.ProcessGroupGloo(timeout=TIMEOUT)
        host = groups.host or socket.gethostname()

        class Reachable(HTTPTransport):
            """torchft's transport of a joining group's state, at the name the other groups reach this pod by
            (torchft's own says the host's name, which another pod cannot resolve)."""

            def address(self) -> str:
                return f"http://{host}:{self._server.socket.getsockname()[1]}/checkpoint/"

        # the group's store is torchrun's (MASTER_PORT, on every interface); the other groups reach it by ``host``
        def manager() -> torchft.Manager:
            return torchft.Manager(
                pg=cross, load_state_dict=load, state_dict=state, min_replica_size=groups.min_replicas,
                use_async_quorum=False, timeout=TIMEOUT, quorum_timeout=QUORUM_TIMEOUT, rank=env.rank,
                world_size=env.world_size, replica_id=groups.replica_id, lighthouse_addr=groups.lighthouse,
                hostname=host, store_addr=host, store_port=int(os.environ["MASTER_PORT"]),
                quorum_retries=QUORUM_RETRIES, checkpoint_transport=Reachable(timeout=TIMEOUT, num_chunks=0))

        self.manager = first_then_the_others(manager, env)
        # the step a checkpoint restored: the group asks to join there, and the quorum goes on from the furthest
        self.manager.load_state_dict({"step": step, "batches_committed": step * groups.groups})
        self.participants = 0  # in the last quorum
        self.attempted = self.committed = 0  # steps this process took, and those that committed

    @property
    def step(self) -> int:
        """The job's committed steps (a group that joined took them from its peer)."""
        return self.manager.current_step()

    def begin(self) -> tuple[int, int]:
        """The step's quorum (a joining group recovers here): this group's part and the number of parts, for
        ``share_of``. A change of the quorum's size is said in one line."""
        before, started = self.manager.current_step(), time.perf_counter()
        self.manager.start_quorum()
        participants, part = self.manager.num_participants(), self.manager.participating_rank()
        if self.manager.current_step() != before:
            self.log(f"{self.groups.replica_id} joined at step {self.manager.current_step()}, its state from a peer "
                     f"in {time.perf_counter() - started:.1f} s: {stepping(participants, self.groups.groups)}")
        elif participants != self.participants and self.participants:
            self.log(f"{stepping(participants, self.groups.groups)} from step {before} (were {self.participants})")
        self.participants = participants
        self.attempted += 1
        assert part is not None, "every group in a quorum taken at the step's start steps"
        return part, participants

    def mine(self, count: int, part: int, parts: int) -> tuple[int, int]:
        """This rank's ``[start, stop)`` of the step's ``count`` examples: its group's part, then its own of that."""
        start, stop = share_of(count, parts, part)
        mine_start, mine_stop = share_of(stop - start, self.env.world_size, self.env.rank)
        return start + mine_start, start + mine_stop

    def most_batches(self, count: int, part: int, parts: int, size: int) -> int:
        """The most batches of ``size`` any rank of this group takes of its part of a step's ``count`` examples
        (at least one)."""
        start, stop = share_of(count, parts, part)
        return max(1, max(-(-(high - low) // size) for low, high in
                          (share_of(stop - start, self.env.world_size, rank) for rank in range(self.env.world_size))))

    def sum_gradients(self, parameters: Sequence[torch.Tensor], weight: float, reduced: bool = False) -> float:
        """Every parameter's gradient becomes the sum over every group's ranks divided by the step's whole weight:
        each rank's backward summed its share's losses, each weighted (by its example, or by its supervised tokens),
        ``weight`` in all on this rank, which travels as the last element of the gradients' one flat sum (a float32:
        exact to 2**24, a relative error of 1e-7 past it). ``reduced``: the group's own backward already averaged
        its ranks' gradients into each rank's shard (fsdp's reduce-scatter), so only the weight is summed in the
        group, and each rank's shard crosses the groups with the same shard of every other group. The whole weight.
        A failure across the groups is the Manager's: the step then does not commit."""
        grads = [_local(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in parameters]
        flat = torch.cat([*grads, torch.tensor([float(weight)], dtype=grads[0].dtype, device=grads[0].device)])
        if self.env.world_size > 1:
            # the group's own: a peer lost here fails this group (its launcher restarts it)
            if reduced:
                flat[:-1] *= self.env.world_size  # the reduce-scatter's mean, back to the group's sum
                dist.all_reduce(flat[-1:])
            else:
                dist.all_reduce(flat)
        self.manager.allreduce(flat, reduce_op=dist.ReduceOp.SUM).wait()
        whole = float(flat[-1])
        flat /= max(whole, 1.0)
        offset = 0
        for parameter in parameters:
            size = _local(parameter).numel()
            summed = flat[offset:offset + size].view_as(_local(parameter))
            if parameter.grad is None:
                parameter.grad = _like(summed.clone(), parameter)
            else:  # in place: DDP's gradients are views of its buckets (gradient_as_bucket_view)
                _local(parameter.grad).copy_(summed)
            offset += size
        return whole

    def commit(self) -> bool:
        """Whether every group's rank finished the step (then the caller steps its optimizer)."""
        committed = self.manager.should_commit()
        self.committed += int(committed)
        live().quorum(self.participants, self.attempted, self.committed)
        return committed

    def close(self) -> None:
        self.manager.shutdown(wait=False)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``tensor``: a sharded parameter's (fsdp's DTensor) shard, the same storage; else itself."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _like(local: torch.Tensor, parameter: torch.Tensor) -> torch.Tensor:
    """``local`` as ``parameter``'s part: a DTensor sharded as the parameter is, where the parameter is one."""
    if not isinstance(parameter, DTensor):
        return local
    return DTensor.from_local(local, parameter.device_mesh, parameter.placements, run_check=False,
                              shape=parameter.shape, stride=parameter.stride())


def first_then_the_others(make: Callable[[], Any], env: DistEnv) -> Any:
    """``make()`` on the group's rank 0, then on its other ranks: torchft's Manager on rank 0 writes its server's
    address in the group's store and the others read it there, and a round restarted in place shares the previous
    round's store (unprefixed keys), so a rank that read first would take a dead round's address."""
    made = make() if env.rank == 0 else None
    if env.world_size > 1:
        dist.barrier()
    return made if env.rank == 0 else make()


class Left(Exception):
    """Every process of this group has agreed to leave on a SIGTERM (a scale-down, a deletion), between two steps: the
    step ``step`` it would take next is the other groups' to take."""

    def __init__(self, step: int):
        super().__init__(f"left before step {step + 1}")
        self.step = step


def missing_torchft() -> list[str]:
    """The refusal of a start without torchft (an extra), or none."""
    import importlib.util

    if importlib.util.find_spec("torchft") is None:
        return ["REPLICA_GROUPS needs torchft: pip install 'indexed-trainer[replicas]' (the image has it)"]
    if "MASTER_PORT" not in os.environ:
        return ["REPLICA_GROUPS: a group runs under its pod's launcher (python -m worker.launch, or torchrun), whose "
                "store the other groups reach"]
    return []


def writes_the_model(last_part: int, stopped: Callable[[], bool], written: Callable[[], bool], device: Any,
                     log: Callable[[str], None], group: str) -> bool:
    """Whether this group writes the job's model at the end: the last step's first group (``last_part`` 0) does.
    Not under a Job (Slurm, whose batch script waits for every node) another group ends at once. Under a Job it
    waits for the Job to end its pod (``stopped()``) up to ``last_part`` x SUCCESSION_SECONDS, and then writes the
    model in the first group's stead unless ``written()`` (the writer lost for good: its index failed, its pod gone
    without a successor). Every process of the group decides alike (``agreed``). A SIGTERM before the model is
    written ends the pod as a leave (the launcher's 82, trainer_launcher.launch.stopped_by), never as the success
    that would complete the Job without its model."""
    if last_part == 0:
        return True
    if "JOB_COMPLETION_INDEX" not in os.environ:
        log(f"{group}: the last step's first group writes the model; this group's part is done")
        return False
    wait = last_part * SUCCESSION_SECONDS
    log(f"{group}: the last step's first group writes the model; waiting for the Job to complete with it and end this "
        f"pod, or {wait:g} s to write it in its place")
    deadline = time.monotonic() + wait
    while not stopped() and time.monotonic() < deadline:
        time.sleep(0.2)  # a flag set by this process's signal handler, not a shared resource
    ended, done = agreed((stopped(), written()), device)
    if ended or done:
        return False
    log(f"{group}: the Job did not complete in {wait:g} s and no model is written: this group writes it")
    return True


def stepping(participants: int, groups: int) -> str:
    """How many groups a step's quorum has, against the job's as submitted (a scaled job may have more)."""
    return f"{participants} of {groups} groups stepping" if participants <= groups else \
        f"{participants} groups stepping (submitted with {groups})"


class _OneLine(logging.Handler):
    """torchft's warnings and errors (a peer's failure it recovers from) as one line each, without the traceback
    its logger adds: a group's failure is expected here, and said by the quorum's lines."""

    def __init__(self, rank: int):
        super().__init__(logging.WARNING)
        self.rank = rank

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().strip().splitlines()
        print(f"Rank {self.rank}: torchft: {text[0] if text else record.levelname}", flush=True)


def _say_in_one_line(logger: logging.Logger, rank: int) -> None:
    if not any(isinstance(handler, _OneLine) for handler in logger.handlers):
        logger.addHandler(_OneLine(rank))
    logger.propagate = False
