"""The training loop of seed 004, plain PyTorch: DistributedDataParallel over every process, automatic mixed
precision (trainer_runtime.precision: bf16 autocast, fp16 with its gradient scaler on CUDA), AdamW with a linear warm-up
and decay, gradient clipping. Every step reseeds the dropout from (SEED, step, rank), so that a run resumed at a
checkpoint takes the very steps the uninterrupted run took."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from trainer_contract import hooks
from trainer_runtime.hub_models.batches import RankBatches, collate
from trainer_runtime.hub_models.run_log import RunLog
from trainer_runtime.precision import Precision


def optimizer_for(model: torch.nn.Module, config: Any) -> torch.optim.AdamW:
    """AdamW; biases and norms (every parameter of fewer than two dimensions) without weight decay."""
    decayed = [parameter for parameter in model.parameters() if parameter.ndim >= 2]
    plain = [parameter for parameter in model.parameters() if parameter.ndim < 2]
    # fused: one kernel over every parameter instead of a loop over them (CPU and CUDA alike)
    return torch.optim.AdamW([{"params": decayed, "weight_decay": config.weight_decay},
                              {"params": plain, "weight_decay": 0.0}], lr=config.learning_rate, fused=True)


def schedule_for(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Loop:
    """One process's share of the training: ``run_epoch`` from where the run stands, ``save`` at the points the
    caller chooses (``every`` steps, the epoch's end, a stop agreed by the gang)."""

    def __init__(self, model: torch.nn.Module, examples: list[dict[str, Any]], batches: RankBatches, pad_id: int,
                 config: Any, device: torch.device, rank: int):
        self.model, self.examples, self.batches, self.pad_id = model, examples, batches, pad_id
        self.config, self.device, self.rank = config, device, rank
        # A transformer's buffers (position ids, token types) are constants: broadcasting them before every forward,
        # DDP's default, is a collective a step for nothing. Batch norms' running statistics do change: kept then.
        statistics = any(isinstance(module, torch.nn.modules.batchnorm._BatchNorm) for module in model.modules())
        self.ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                           broadcast_buffers=statistics, gradient_as_bucket_view=True)
        self.precision = Precision(config.precision, device, sharded=False)
        self.optimizer = optimizer_for(model, config)
        self.total = len(batches) * config.epochs
        self.schedule = schedule_for(self.optimizer, config.warmup_steps, self.total)
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(), "scaler": self.precision.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.precision.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.batches.resume_at = divmod(self.step, len(self.batches))

    def train_step(self, indices: list[int]) -> tuple[float, int]:
        """One optimizer step on the examples ``indices``: its loss and the tokens it saw."""
        batch = {key: value.to(self.device) for key, value in
                 collate([self.examples[index] for index in indices], self.pad_id).items() if key != "index"}
        torch.manual_seed(hash((self.config.seed, self.step, self.rank)) % (1 << 62))
        self.ddp.train()
        with self.precision.autocast():
            loss = self.ddp(**batch).loss
        self.precision.backward(loss)
        if self.config.max_grad_norm:
            self.precision.unscale(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.precision.step(self.optimizer)
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return float(loss.detach()), int(batch["attention_mask"].sum())

    def run_epoch(self, epoch: int, run_log: RunLog, checkpoint: Callable[[], None], stop_agreed: Callable[[], bool]
                  ) -> None:
        """Epoch ``epoch`` (from 0) from where the run stands; ``checkpoint()`` every CHECKPOINT_EVERY_STEPS steps
        and before returning early when ``stop_agreed()``, which raises after the checkpoint."""
        self.batches.set_epoch(epoch)
        per_epoch, every, losses = len(self.batches), self.config.checkpoint_every_steps, []
        for indices in self.batches:
            hooks.point("batch", epoch=epoch + 1, batch=self.step - epoch * per_epoch + 1)
            loss, tokens = self.train_step(indices)
            losses.append(loss)
            run_log.tokens += tokens
            last = self.step == (epoch + 1) * per_epoch
            if run_log.due(self.step, last):
                run_log.trained(epoch=epoch + 1, epochs=self.config.epochs, step=self.step, total=self.total,
                                loss=sum(losses) / len(losses), learning_rate=float(self.schedule.get_last_lr()[0]))
                losses = []
            if stop_agreed():
                checkpoint()
                raise Stopped
            if every and self.step % every == 0 and not last:
                checkpoint()


class Stopped(Exception):
    """The gang agreed to stop (SIGTERM somewhere in it); the checkpoint is written."""
