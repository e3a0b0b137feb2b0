"""What a strategy does for the trainer, and the parts they share: state dicts by parameter name, so that a
checkpoint written under one strategy resumes under another and at another world size. A strategy whose ranks
hold the whole model reads and loads them with the module's and optimizer's own state dicts; one that shards it
(fsdp) through torch.distributed.checkpoint's state_dict API, imported only then (it costs every process about
half a second and 50 MiB)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer_runtime.distenv import DistEnv
from trainer_runtime.gradsync import StepAgreement
from trainer_runtime.precision import Precision


class Strategy:
    name = "base"
    # each rank holds a shard of the parameters, gradients and optimizer state: getting the whole model is a
    # collective, and checkpoints are written as shards by every rank (trainer_runtime.checkpoints.sharded)
    shards_parameters = False

    def __init__(self, module: nn.Module, env: DistEnv, device: torch.device, precision: Precision):
        self.module, self.env, self.device, self.precision = module, env, device, precision
        self.world_size = env.world_size
        # seconds the last backward() waited for communication after its own computation: the flat all-reduce
        # under allreduce; under ddp and fsdp the gradients travel during backward, and this is the tail left
        self.sync_seconds = 0.0

    # -- the step ------------------------------------------------------------------------------------
    @property
    def model(self) -> nn.Module:
        """What the training forward calls (a wrapper under ddp)."""
        return self.module

    @property
    def forwards_empty_batches(self) -> bool:
        """True where every rank must run forward and backward in every step (the collectives are in them)."""
        return True

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor | None, samples: int, global_samples: int,
                 stop_requested: bool, checkpoint_due: bool = False) -> StepAgreement:
        """Backpropagate ``loss`` (the sum over this rank's ``samples``) so that every rank ends with the gradient
        of the global batch's summed loss divided by its ``global_samples``; return what the gang agreed: the
        step's samples, a stop (``stop_requested`` somewhere), a checkpoint (``checkpoint_due`` somewhere: rank 0's
        clock)."""
        control = torch.tensor([float(samples), float(stop_requested), float(checkpoint_due)], dtype=torch.float64,
                               device=self.device)
        # the control values travel beside the gradients, overlapped with backward
        work = dist.all_reduce(control, async_op=True) if self.world_size > 1 else None
        # the collectives in backward average over ranks: scale the sum so that the average is sum / global
        assert loss is not None, "ddp and fsdp forward every batch, empty ones too (forwards_empty_batches)"
        self.precision.backward(loss * (self.world_size / max(global_samples, 1)))
        started = time.perf_counter()
        if work is not None:
            work.wait()
        total, stops, checkpoints = control.tolist()
        self.sync_seconds = time.perf_counter() - started
        return StepAgreement(int(total), stops > 0, checkpoints > 0)

    def local_gradients(self) -> contextlib.AbstractContextManager[None]:
        """Backward passes in here add to this rank's gradients without any communication: the batches of an
        optimizer step but its last (gradient accumulation), whose backward() then combines the sums."""
        return contextlib.nullcontext()

    def step(self) -> None:
        self.precision.step(self.optimizer)

    # -- state ---------------------------------------------------------------------------------------
    def full_model_state(self) -> dict[str, Any]:
        """The whole model's weights as plain CPU tensors on rank 0 (a collective under fsdp)."""
        if not self.shards_parameters:
            return {name: tensor.detach().cpu() for name, tensor in self.module.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def full_state(self) -> tuple[dict, dict]:
        """(model, optimizer) state by parameter name, whole tensors, on rank 0: a checkpoint file's content."""
        if not self.shards_parameters:
            return self.full_model_state(), by_name(self.optimizer.state_dict(), self.module)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        return get_state_dict(self.module, self.optimizer,
                              options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def trainable_state(self, optimizer: bool = True) -> tuple[dict, dict]:
        """(model, optimizer) state of the weights that train, by name, whole tensors on rank 0 (empty elsewhere),
        under any strategy: what a checkpoint of adapters holds (LoRA: a few MiB, not the frozen model). A
        collective: every rank calls it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        if not optimizer:
            return get_model_state_dict(self.module, options=options), {}
        with self.optimizer_state_initializable():
            return get_state_dict(self.module, self.optimizer, options=options)

    def load_trainable_state(self, model_state: dict, optimizer_state: dict) -> None:
        """Put ``trainable_state``'s content (read by every rank) back; each rank keeps its shard under fsdp. A
        weight that trains and is missing, or one the model lacks, is an error."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        with self.optimizer_state_initializable():
            set_state_dict(self.module, self.optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state,
                           options=StateDictOptions(full_state_dict=True, ignore_frozen_params=True))

    def sharded_state(self) -> dict:
        """This rank's part of the model and optimizer state (whole tensors where nothing is sharded)."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        with self.optimizer_state_initializable():
            model, optimizer = get_state_dict(self.module, self.optimizer)
        return {"model": model, "optimizer": optimizer}

    def load_full(self, model_state: dict, optimizer_state: dict) -> None:
        """Load a checkpoint file's state (each rank holds all of it; under fsdp each keeps its shard)."""
        optimizer_state = by_name(optimizer_state, self.module)
        # keys a learning-rate scheduler added to the groups (initial_lr, max_lr, ...): the trainer's scheduler
        # sets them again when it is rebuilt, and a fresh optimizer's groups lack them
        known = set(self.optimizer.param_groups[0]) | {"params"}
        optimizer_state = {**optimizer_state, "param_groups": [
            {key: value for key, value in group.items() if key in known} for group in optimizer_state["param_groups"]]}
        if not self.shards_parameters:
            self.module.load_state_dict(model_state)
            self.optimizer.load_state_dict(by_position(optimizer_state, self.module))
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        with self.optimizer_state_initializable():  # each rank takes its shard of the whole tensors
            set_state_dict(self.module, self.optimizer, model_state_dict=model_state,
                           optim_state_dict=optimizer_state, options=StateDictOptions(full_state_dict=True))

    def load_sharded_state(self, state: dict) -> None:
        """Take ``state`` (``sharded_state``'s shape, filled from a sharded checkpoint, resharded to this world
        size) into the model and the optimizer."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.module, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])

    @contextlib.contextmanager
    def optimizer_state_initializable(self):
        """get_state_dict creates a fresh optimizer's state (a zero-learning-rate step) only while no parameter
        holds a gradient; a strategy that keeps gradients bound lifts them for that moment."""
        yield


def by_position(optimizer_state: dict, module: nn.Module) -> dict:
    """The inverse of by_name: torch.optim's own form, keyed by the parameter's position in module.parameters()."""
    position = {name: index for index, (name, _) in enumerate(module.named_parameters())}
    return {
        "state": {position[name]: value for name, value in optimizer_state["state"].items()},
        "param_groups": [{**group, "params": [position[name] for name in group["params"]]}
                         for group in optimizer_state["param_groups"]],
    }


def by_name(optimizer_state: dict, module: nn.Module) -> dict:
    """An optimizer state dict keyed by parameter name. Checkpoints before strategies existed hold
    torch.optim's own form, keyed by the parameter's position in module.parameters()."""
    groups = optimizer_state.get("param_groups") or []
    if not groups or not groups[0].get("params") or not isinstance(groups[0]["params"][0], int):
        return optimizer_state
    names = [name for name, _ in module.named_parameters()]
    return {
        "state": {names[index]: value for index, value in optimizer_state["state"].items()},
        "param_groups": [{**group, "params": [names[index] for index in group["params"]]} for group in groups],
    }
