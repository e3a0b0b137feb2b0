"""The supervised fine-tuning loop on the runtime's strategies (STRATEGY=ddp: DistributedDataParallel over the
weights that train; fsdp: FSDP2 per decoder block), automatic mixed precision (trainer_runtime.precision), AdamW
with a linear warm-up and decay (finetune's), gradient clipping. The update is the mean over the ranks of each
rank's loss per supervised token. Every step reseeds the dropout from (SEED, step, rank), so a run resumed at a
checkpoint takes the very steps the uninterrupted run took. Evaluation: the mean loss over the supervised tokens of
the whole held-out split (summed across the gang), and its perplexity."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from trainer_contract import hooks
from trainer_runtime import strategies
from trainer_runtime.distenv import DistEnv
from trainer_runtime.hub_models.batches import RankBatches
from trainer_runtime.hub_models.run_log import RunLog
from trainer_runtime.precision import Precision
from worker.finetune.loop import schedule_for
from worker.sft.examples import IGNORE, Example


def collate(examples: list[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """One batch padded to its longest example: the padding attends nowhere and is never supervised."""
    longest = max(len(example.input_ids) for example in examples)
    pads = [longest - len(example.input_ids) for example in examples]
    return {"input_ids": torch.tensor([e.input_ids + [pad_id] * pad for e, pad in zip(examples, pads, strict=True)]),
            "labels": torch.tensor([e.labels + [IGNORE] * pad for e, pad in zip(examples, pads, strict=True)]),
            "attention_mask": torch.tensor([[1] * len(e.input_ids) + [0] * pad
                                            for e, pad in zip(examples, pads, strict=True)])}


def optimizer_for(model: torch.nn.Module, config: Any) -> torch.optim.AdamW:
    """AdamW over the trainable weights; biases and norms (fewer than two dimensions) without weight decay."""
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    decayed = [parameter for parameter in trainable if parameter.ndim >= 2]
    plain = [parameter for parameter in trainable if parameter.ndim < 2]
    groups = [{"params": decayed, "weight_decay": config.weight_decay}]
    if plain:
        groups.append({"params": plain, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=config.learning_rate, fused=True)


class Loop:
    def __init__(self, model: torch.nn.Module, examples: list[Example], batches: RankBatches, pad_id: int,
                 config: Any, device: torch.device, env: DistEnv):
        self.examples, self.batches, self.pad_id = examples, batches, pad_id
        self.config, self.device, self.rank = config, device, env.rank
        # the strategy shards the model in place under fsdp: the optimizer is made over what it leaves
        self.strategy = strategies.build(config.strategy, model.to(device), env, device, config.precision)
        self.model, self.precision = self.strategy.module, self.strategy.precision
        self.optimizer = optimizer_for(self.model, config)
        self.strategy.attach(self.optimizer)
        self.total = len(batches) * config.epochs
        self.schedule = schedule_for(self.optimizer, config.warmup_steps, self.total)
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds (whole on rank 0; a collective: every rank calls it)."""
        model, optimizer = self.strategy.trainable_state()
        return {"model": model, "optimizer": optimizer, "schedule": self.schedule.state_dict(),
                "scaler": self.precision.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.strategy.load_trainable_state(state["model"], state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.precision.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.batches.resume_at = divmod(self.step, len(self.batches))

    def train_step(self, indices: list[int], stop_requested: bool) -> tuple[float, int, bool]:
        """One optimizer step on the examples ``indices``: its loss, the tokens it saw, and whether the gang
        agreed to stop (told beside the gradients)."""
        batch = {key: value.to(self.device) for key, value in
                 collate([self.examples[index] for index in indices], self.pad_id).items()}
        torch.manual_seed(hash((self.config.seed, self.step, self.rank)) % (1 << 62))
        self.strategy.model.train()
        with self.precision.autocast():
            loss = self.strategy.model(**batch).loss
        _, stop = self.strategy.backward(loss, 1, self.strategy.world_size, stop_requested)
        if self.config.max_grad_norm:
            self.precision.unscale(self.optimizer)
            torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                           self.config.max_grad_norm)
        self.strategy.step()
        self.schedule.step()
        self.strategy.zero_grad()
        self.step += 1
        return float(loss.detach()), int(batch["attention_mask"].sum()), stop

    def run_epoch(self, epoch: int, run_log: RunLog, checkpoint: Callable[[], None],
                  stop_requested: Callable[[], bool]) -> None:
        """Epoch ``epoch`` (from 0) from where the run stands; ``checkpoint()`` every CHECKPOINT_EVERY_STEPS steps,
        and then ``Stopped`` raised when a rank's ``stop_requested()`` was true in a step."""
        self.batches.set_epoch(epoch)
        per_epoch, every, losses = len(self.batches), self.config.checkpoint_every_steps, []
        for indices in self.batches:
            hooks.point("batch", epoch=epoch + 1, batch=self.step - epoch * per_epoch + 1)
            loss, tokens, stop = self.train_step(indices, stop_requested())
            losses.append(loss)
            run_log.tokens += tokens
            last = self.step == (epoch + 1) * per_epoch
            if run_log.due(self.step, last):
                run_log.trained(epoch=epoch + 1, epochs=self.config.epochs, step=self.step, total=self.total,
                                loss=sum(losses) / len(losses), learning_rate=float(self.schedule.get_last_lr()[0]))
                losses = []
            if stop:
                checkpoint()
                raise Stopped
            if every and self.step % every == 0 and not last:
                checkpoint()


class Stopped(Exception):
    """The gang agreed to stop (SIGTERM somewhere in it); the checkpoint is written."""


@torch.no_grad()
def evaluate(model: torch.nn.Module, examples: list[Example], batch_size: int, pad_id: int, precision: Precision,
             device: torch.device, rank: int, world_size: int) -> dict[str, float]:
    """The mean loss per supervised token over the whole split (every process its share), and its perplexity.
    Every rank runs the same number of forwards (a sharded model gathers its weights in each): a rank whose share
    is shorter runs its last ones on a stand-in example it does not count."""
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # summed token losses, supervised tokens
    mine = examples[rank::world_size]
    for start in range(0, math.ceil(len(examples) / world_size), batch_size):
        part = mine[start:start + batch_size]
        batch = {key: value.to(device) for key, value in collate(part or examples[:1], pad_id).items()}
        labels = batch.pop("labels")
        with precision.autocast():
            logits = model(**batch).logits.float()
        shifted = labels[:, 1:]
        losses = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), shifted.reshape(-1),
                                                   ignore_index=IGNORE, reduction="sum")
        if part:
            totals += torch.stack([losses.double(), (shifted != IGNORE).sum().double()])
    if world_size > 1:
        dist.all_reduce(totals)
    model.train()
    loss = float(totals[0] / totals[1].clamp(min=1))
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


@torch.no_grad()
def complete(model: Any, tokenizer: Any, prompts: list[str], device: torch.device, max_new_tokens: int = 32
             ) -> list[str]:
    """Greedy completions of ``prompts`` (rendered as a user turn where the tokenizer has a chat template); every
    rank computes them (a sharded model's forward is a collective), rank 0 logs them."""
    model.eval()
    completions = []
    for prompt in prompts:
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True)
        else:
            text = prompt
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]], device=device)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        completions.append(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    model.train()
    return completions
