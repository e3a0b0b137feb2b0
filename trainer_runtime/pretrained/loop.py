"""The training loop the transformer workloads share (worker.finetune, worker.sft): the model on one of the runtime's
strategies (trainer_runtime.strategies: ddp, or fsdp sharded per block), automatic mixed precision
(trainer_runtime.precision: bf16 autocast, fp16 with its gradient scaler on CUDA), AdamW over the weights that train
with a linear warm-up and decay, gradient clipping. The update is the mean over the ranks of each rank's batch loss
(the model's own: per token or per example). Every step reseeds the dropout from (SEED, step, rank), so a run
resumed at a checkpoint takes the very steps the uninterrupted run took. A checkpoint holds the weights that train
and their optimizer state by name (the strategy's ``trainable_state``: under LoRA the adapters alone), with the
schedule, the scaler and the step; a workload supplies its examples, how a batch of them is collated, and when to
checkpoint and evaluate."""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer_contract import hooks
from trainer_runtime import strategies
from trainer_runtime.checkpoints import safe_load, sharded, single_file
from trainer_runtime.checkpoints.beside import CheckpointWrite, WritesBeside
from trainer_runtime.checkpoints.clock import CheckpointClock
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.gradsync import StepAgreement
from trainer_runtime.pretrained import checkpoint_record, shared_load
from trainer_runtime.pretrained.best_checkpoint import BestCheckpoint
from trainer_runtime.pretrained.schedules import schedule_for
from trainer_runtime.run_log import RunLog
from trainer_runtime.sampler import RankBatches
from trainer_runtime.stop import Stopped, StopRequest

Collate = Callable[[list[Any]], dict[str, torch.Tensor]]
# What a batch's loss is the mean over (the model's own loss: per example, or per supervised token of a causal LM)
Weigh = Callable[[dict[str, torch.Tensor]], int]
# A workload's evaluation: its scores and the line that says them
Evaluate = Callable[[], tuple[dict[str, float], str]]


def examples_in(batch: dict[str, torch.Tensor]) -> int:
    return len(batch["attention_mask"])


def optimizer_for(model: torch.nn.Module, config: Any) -> torch.optim.AdamW:
    """AdamW over the weights that train; biases and norms (fewer than two dimensions) without weight decay."""
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    groups = [{"params": [p for p in trainable if p.ndim >= 2], "weight_decay": config.weight_decay}]
    plain = [p for p in trainable if p.ndim < 2]
    if plain:
        groups.append({"params": plain, "weight_decay": 0.0})
    # fused: one kernel over every parameter instead of a loop over them (CPU and CUDA alike)
    return torch.optim.AdamW(groups, lr=config.learning_rate, fused=True)


class Loop:
    """One process's share of the training: ``run_epoch`` from where the run stands, ``checkpoint()`` at the
    points it is due (every CHECKPOINT_EVERY_STEPS steps, when the gang agrees that CHECKPOINT_EVERY_SECONDS have
    passed, a stop agreed by the gang); ``state_dict`` is what it writes (a collective: every rank calls it)."""

    def __init__(self, model: torch.nn.Module, examples: Sequence[Any], batches: RankBatches, collate: Collate,
                 config: Any, device: torch.device, env: DistEnv, strategy: str = "ddp", weigh: Weigh = examples_in,
                 log: Callable[[str], None] = print):
        self.examples, self.batches, self.collate, self.weigh = examples, batches, collate, weigh
        self.config, self.device, self.rank = config, device, env.rank
        # the strategy shards the model in place under fsdp: the optimizer is made over what it leaves
        if shared_load.on_meta(model) and not strategies.shards_parameters(strategy):
            shared_load.materialize(model, device)  # a whole copy per rank: before the strategy wraps it
        self.strategy = strategies.build(strategy, shared_load.placed(model, device), env, device, config.precision)
        if shared_load.on_meta(model):
            shared_load.materialize(model, device)  # no rank read the weights: each makes its shards for the resume
        self.model, self.precision = self.strategy.module, self.strategy.precision
        self.optimizer = optimizer_for(self.model, config)
        self.strategy.attach(self.optimizer)
        # TRL's max_steps: when set, it decides the run's length (and the schedule's) instead of EPOCHS
        self.total = config.max_steps or len(batches) * config.epochs
        self.epochs_in_all = -(-self.total // len(batches))
        self.schedule = schedule_for(self.optimizer, config.lr_scheduler_type, config.warmup_steps, self.total)
        self.step = 0
        self.clock = CheckpointClock(config.checkpoint_every_seconds, votes=env.rank == 0, nodes=env.nodes, log=log)
        self.best = BestCheckpoint(config.metric_for_best_model)
        self.writes = WritesBeside()  # CHECKPOINT_ASYNC's
        self.evaluating_seconds = 0.0  # this start's evaluations: not training time

    @property
    def sharded_checkpoints(self) -> bool:
        """A full fine-tune under fsdp or hsdp: each rank writes and reads its own shards of the weights and of
        AdamW's state (the sharded format), rather than gathering all of it on rank 0 and reading it whole on every
        rank. A LoRA run's adapters (MiB) stay one file, which resumes under any strategy."""
        return self.strategy.shards_parameters and all(p.requires_grad for p in self.model.parameters())

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint file holds (whole on rank 0; a collective: every rank calls it)."""
        model, optimizer = self.strategy.trainable_state()
        return {"model": model, "optimizer": optimizer, **self.progress()}

    def progress(self) -> dict[str, Any]:
        """Where the run stands beside its tensors: the schedule, the scaler, the step and the best evaluation."""
        return {"schedule": self.schedule.state_dict(), "scaler": self.precision.state_dict(), "step": self.step,
                "best": self.best.best}

    def restore(self, path: Path, progress: bool = True) -> None:
        """Every rank: the weights and optimizer state of checkpoint ``path`` (a file, or a directory of shards,
        resharded to this gang), and with ``progress`` where the run stood."""
        if not path.is_dir():
            state = single_file.read_payload(path)
            if progress:
                self.load_state_dict(state)
            else:
                self.strategy.load_trainable_state(state["model"], state["optimizer"])
            return
        shards = self.strategy.sharded_state()
        safe_load.dcp_load(shards, path)
        self.strategy.load_sharded_state(shards)
        if progress:
            self.load_progress(sharded.read_extra(path))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        groups = state["optimizer"]["param_groups"]
        if groups and groups[0]["params"] and isinstance(groups[0]["params"][0], int):
            # torch.optim's own form, by position: worker.finetune's checkpoints before they held names
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            self.strategy.load_trainable_state(state["model"], state["optimizer"])
        self.load_progress(state)

    def load_progress(self, state: dict[str, Any]) -> None:
        self.schedule.load_state_dict(state["schedule"])
        self.precision.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.best.best = state.get("best")  # absent from the checkpoints of versions before METRIC_FOR_BEST_MODEL
        self.batches.resume_at = divmod(self.step, len(self.batches))

    def train_step(self, indices: list[int], stop_requested: bool) -> tuple[float, int, StepAgreement]:
        """One optimizer step on the examples ``indices``, in batches of BATCH_SIZE whose gradients add up (the
        last one's travel, with what the gang agrees beside them: a stop, a checkpoint by time); each batch's loss
        is weighted by its share of what the step's loss is a mean over (``weigh``: examples, or supervised
        tokens), so that the step's is that mean whatever the split. The step's loss and the tokens it saw."""
        torch.manual_seed(hash((self.config.seed, self.step, self.rank)) % (1 << 62))
        self.strategy.model.train()
        size = self.config.batch_size
        parts = [self.collate([self.examples[index] for index in indices[start:start + size]])
                 for start in range(0, len(indices), size)]
        weights = [self.weigh(part) for part in parts]
        step_loss, tokens = 0.0, 0
        for number, part in enumerate(parts):
            batch = {key: value.to(self.device) for key, value in part.items()}
            with self.precision.autocast():
                loss = self.strategy.model(**batch).loss * (weights[number] / max(sum(weights), 1))
            if number + 1 < len(parts):
                with self.strategy.local_gradients():
                    self.precision.backward(loss)
            else:
                agreed = self.strategy.backward(loss, 1, self.strategy.world_size, stop_requested, self.clock.due())
            step_loss, tokens = step_loss + float(loss.detach()), tokens + int(batch["attention_mask"].sum())
        if self.config.max_grad_norm:
            self.precision.unscale(self.optimizer)
            torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                           self.config.max_grad_norm)
        self.strategy.step()
        self.schedule.step()
        self.strategy.zero_grad()
        self.step += 1
        return step_loss, tokens, agreed

    def epochs(self, run_log: RunLog, stop: StopRequest, store: CheckpointStore, record: dict[str, Any],
               evaluate: Evaluate) -> dict[str, float]:
        """Every epoch left from where the run stands, each ended by ``evaluate()`` (its scores and the line that
        says them) and a checkpoint, as every EVAL_STEPS steps are; the last scores with this start's training
        seconds (evaluations left out, checkpoints in: what tokens/s per process divides by). ``Stopped`` when the
        gang agreed to stop."""
        def checkpoint(wait: bool = False) -> None:
            self.checkpoint(store, record, wait=wait)

        def evaluated(epoch: int, within: bool) -> dict[str, float]:
            return self.evaluation_point(epoch, within, run_log, evaluate, checkpoint, store)

        per_epoch = len(self.batches)
        config, world = self.config, self.strategy.world_size
        accumulated = self.batches.batch_size // config.batch_size
        kept = f", GLOBAL_BATCH_SIZE {config.global_batch_size}" if config.global_batch_size else ""
        run_log.start(self.step, self.total, f" ({config.batch_size * accumulated * world} examples a step: "
                      f"BATCH_SIZE {config.batch_size} x GRADIENT_ACCUMULATION_STEPS {accumulated} x {world} "
                      f"processes{kept})")
        result: dict[str, float] = {}
        began = time.monotonic()
        store.also_kept = frozenset(self.best.kept())  # a resumed run's best, before any checkpoint prunes
        self.clock.restart()  # CHECKPOINT_EVERY_SECONDS count training time, from here
        for epoch in range(self.step // per_epoch, self.epochs_in_all):
            self.run_epoch(epoch, run_log, checkpoint, lambda: stop.requested, functools.partial(evaluated, epoch, True))
            result = evaluated(epoch, False)
        self.writes.wait()  # the last checkpoint is whole before the run exports or ends
        training = time.monotonic() - began - self.evaluating_seconds
        return {**(result or evaluate()[0]), "train_seconds": round(training, 3)}  # nothing left: as it is

    def evaluation_point(self, epoch: int, within: bool, run_log: RunLog, evaluate: Evaluate,
                         checkpoint: Callable[[], None], store: CheckpointStore) -> dict[str, float]:
        """Evaluate (at epoch ``epoch``'s end, or ``within`` it), record the scores, offer them as the best so far
        (METRIC_FOR_BEST_MODEL: the store then keeps this step's checkpoint beside the newest), then checkpoint."""
        began = time.monotonic()
        result, line = evaluate()
        self.evaluating_seconds += time.monotonic() - began
        run_log.evaluated(self.step, epoch + 1, result, line, within_epoch=within)
        self.best.offer(result, self.step, checkpoint_record.checkpoint_name(self.step))
        store.also_kept = frozenset(self.best.kept())
        checkpoint()
        return result

    def checkpoint(self, store: CheckpointStore, record: dict[str, Any], *, wait: bool = False) -> None:
        """The state named by the step with the run's ``record``: one file written by rank 0, or every rank's shards
        (``sharded_checkpoints``: the record in the manifest, the progress beside); published in ``store``. Under
        CHECKPOINT_ASYNC the training waits only while its state is copied, the write going on beside the next
        steps (trainer_runtime/checkpoints/beside.py), the one before waited for first; else, and with ``wait`` (a
        stop's), no rank goes on (or exits) before it is whole."""
        self.writes.wait(whole=not wait)  # one write at a time, in order; a failed one raises here
        with self.clock.saving():  # the interval starts again once the training goes on
            self._save(store, record, wait)

    def _save(self, store: CheckpointStore, record: dict[str, Any], wait: bool) -> None:
        started = time.perf_counter()
        path = store.directory / checkpoint_record.checkpoint_name(self.step)
        beside = self.config.checkpoint_async and not wait
        stage = self.writes.staging.copy if beside else None
        every_rank = self.sharded_checkpoints
        finish: Callable[[], Any] | None = None
        if every_rank:
            finish = sharded.begin_shards(self.strategy.sharded_state(), record, path, self.rank, stage=stage,
                                          group=self.writes.write_group(store) if beside else None,
                                          extra=copy.deepcopy(self.progress()))
        else:
            state = self.state_dict()  # a collective
            if self.rank == 0:
                payload = {**state, checkpoint_record.RECORD_KEY: record}
                payload = stage(payload) if stage is not None else payload
                finish = functools.partial(single_file.write_payload, path, payload)
        waited = time.perf_counter() - started if beside else None
        write = CheckpointWrite(finish, path, self.rank, store, self.clock, started, waited,
                                by_ranks=every_rank and (beside or wait))
        if beside:
            self.writes.start(write, every_rank)
        else:
            self.writes.written(write)
            dist.barrier()

    def run_epoch(self, epoch: int, run_log: RunLog, checkpoint: Callable[..., None],
                  stop_requested: Callable[[], bool], evaluate_here: Callable[[], Any] = lambda: None) -> None:
        """Epoch ``epoch`` (from 0) from where the run stands; ``evaluate_here()`` (which checkpoints) every
        EVAL_STEPS steps, else ``checkpoint()`` every CHECKPOINT_EVERY_STEPS steps and when the gang agrees that
        CHECKPOINT_EVERY_SECONDS have passed (but at the epoch's last step: ``epochs`` evaluates and checkpoints
        after it), and then ``Stopped`` raised when a rank's ``stop_requested()`` was true in a step."""
        self.batches.set_epoch(epoch)
        per_epoch, every, losses = len(self.batches), self.config.checkpoint_every_steps, []
        evaluate_every = self.config.eval_steps
        end = min((epoch + 1) * per_epoch, self.total)  # MAX_STEPS may end the run inside this epoch
        for indices in self.batches:
            if self.step >= end:
                break
            hooks.point("batch", epoch=epoch + 1, batch=self.step - epoch * per_epoch + 1)
            loss, tokens, agreed = self.train_step(indices, stop_requested())
            losses.append(loss)
            run_log.tokens += tokens
            last = self.step == end
            if run_log.due(self.step, last):
                run_log.trained(epoch=epoch + 1, epochs=self.epochs_in_all, step=self.step, total=self.total,
                                loss=sum(losses) / len(losses), learning_rate=float(self.schedule.get_last_lr()[0]))
                losses = []
            if agreed.stop:
                checkpoint(wait=True)  # written before the process exits
                raise Stopped(f"step {self.step}")
            if last:
                continue
            if evaluate_every and self.step % evaluate_every == 0:
                evaluate_here()
            elif agreed.checkpoint or (every and self.step % every == 0):
                checkpoint()
