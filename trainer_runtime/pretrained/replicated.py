"""The transformer loop (trainer_runtime.pretrained.loop) as one replica group of several (REPLICA_GROUPS;
trainer_runtime/replica_groups.py): worker.finetune's and worker.sft's steps shared by the groups in each step's
quorum, a failed group costing that group, a group that joins taking the weights, AdamW's state and the schedule from
a peer.

A step takes the epoch's next BATCH_SIZE x GRADIENT_ACCUMULATION_STEPS x processes per group x REPLICA_GROUPS
examples in the uninterrupted run's order, whichever groups step: the groups' parts, then each rank's of its group's,
each in batches of BATCH_SIZE whose gradients add up. Each batch's loss is the model's mean over what the workload
weighs (examples, or supervised tokens) times that weight, and the step's gradient their sum over every group divided
by the step's whole weight, which travels with the gradients: the gang's mean, so the learning follows the committed
steps alone.

The quorum's first group checkpoints (the loop's own checkpoints: for a loss of every group at once) and each group's
rank 0 records its own steps (OUTPUT_DIR/metrics.jsonl for group 0, OUTPUT_DIR/.groups/<index>/ for the others).
The last step's first group exports the model and writes the summary; under a Job the others wait for the Job to
complete with it (its successPolicy, succeededCount 1, then ends them), one of them exporting in its stead where it is
lost for good (trainer_runtime.replica_groups.writes_the_model).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer_contract import exit_codes, hooks
from trainer_contract.gang_rounds import note_progress
from trainer_contract.replica_groups import ReplicaGroups, program_problem, setting_problems, written_by
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import Refusal
from trainer_runtime.finished_run import is_finished
from trainer_runtime.pretrained.loop import Evaluate, Loop
from trainer_runtime.replica_groups import Left, ReplicaGroup, missing_torchft, writes_the_model
from trainer_runtime.run_log import RunLog
from trainer_runtime.stop import StopRequest, agreed

# Where a group other than group 0 keeps its own records (metrics.jsonl, curves), beside its gang notes
GROUPS_DIRECTORY = ".groups"


def refusals(config: Any, module: str) -> list[str]:
    """What a replica group of the built-in program ``module`` cannot run with, each naming its setting."""
    refused = program_problem(module, f"python -m {module}")
    return missing_torchft() or ([f"REPLICA_GROUPS: {refused}"] if refused else setting_problems(module, config))


def records_dir(output_dir: Path, groups: ReplicaGroups) -> Path:
    """Where this group's rank 0 records its steps."""
    return output_dir if groups.group == 0 else output_dir / GROUPS_DIRECTORY / str(groups.group)


@dataclass
class Finished:
    """What the groups' training ended with: the last scores, its seconds, and this group's part in the last step."""

    scores: dict[str, float]
    train_seconds: float
    last_part: int


class ReplicatedLoop:
    """``loop``'s model, optimizer, schedule and checkpoints, stepped by the quorums of ``groups``."""

    def __init__(self, loop: Loop, groups: ReplicaGroups, env: DistEnv, log: Callable[[str], None]):
        self.loop, self.groups, self.env, self.log = loop, groups, env, log
        self.step_examples = loop.batches.batch_size  # the whole step's: RankBatches of rank 0 of 1 (training.py)
        self.per_epoch = len(loop.batches)
        self.order: tuple[int, list[int]] | None = None
        self.parameters = [p for p in loop.model.parameters() if p.requires_grad]
        self.group = ReplicaGroup(groups, env, loop.device, self.state, self.load, log, loop.step)
        self.last_part = 0
        self.saved = -1  # the step of this group's newest checkpoint

    def state(self) -> dict[str, Any]:
        """What a joining group takes from a peer."""
        loop = self.loop
        return {"model": loop.model.state_dict(), "optimizer": loop.optimizer.state_dict(),
                "schedule": loop.schedule.state_dict()}

    def load(self, recovered: dict[str, Any]) -> None:
        loop = self.loop
        loop.model.load_state_dict(recovered["model"])
        loop.optimizer.load_state_dict(recovered["optimizer"])
        loop.schedule.load_state_dict(recovered["schedule"])

    def examples(self, step: int) -> list[int]:
        """The examples of the job's step ``step``: the same whichever groups take it."""
        epoch, within = divmod(step, self.per_epoch)
        if self.order is None or self.order[0] != epoch:
            self.loop.batches.set_epoch(epoch)
            self.order = epoch, self.loop.batches.share()
        return self.order[1][within * self.step_examples:(within + 1) * self.step_examples]

    def train(self, run_log: RunLog, stop: StopRequest, store: CheckpointStore, record: dict[str, Any],
              evaluate: Evaluate) -> Finished:
        """Step with the quorums until the job's last step; ``Left`` where every process of the group agreed to
        leave on a SIGTERM (between two steps)."""
        loop = self.loop
        scores: dict[str, float] = {}
        run_log.start(self.group.step, loop.total, f" ({self.step_examples} examples a step, shared by the "
                                                   f"{self.groups.groups} replica groups' quorum)")
        began = time.monotonic()
        loop.clock.restart()  # CHECKPOINT_EVERY_SECONDS count training time, from here
        while self.group.step < loop.total:
            stopping, due = agreed((stop.requested, loop.clock.due()), loop.device)
            if stopping:
                raise Left(self.group.step)
            part, parts = self.group.begin()
            if self.take_step(part, parts, run_log):
                scores = self.after_step(part, due, run_log, store, record, evaluate) or scores
        loop.writes.wait()  # the last checkpoint is whole before the export
        return Finished(scores or evaluate()[0], time.monotonic() - began, self.last_part)

    def take_step(self, part: int, parts: int, run_log: RunLog) -> bool:
        """This rank's share of the step, the gradients summed over every group, the optimizer's step where it
        commits (else the next quorum takes the same step again); whether it committed."""
        loop, step = self.loop, self.group.step
        examples = self.examples(step)
        start, stop = self.group.mine(len(examples), part, parts)
        epoch, within = divmod(step, self.per_epoch)
        hooks.point("batch", epoch=epoch + 1, batch=within + 1)
        torch.manual_seed(hash((loop.config.seed, step, self.env.rank)) % (1 << 62))
        loop.strategy.model.train()
        loss_sum, weight, tokens = self.backward(examples, start, stop, part, parts)
        self.group.sum_gradients(self.parameters, weight, reduced=loop.strategy.shards_parameters)
        if loop.config.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.parameters, loop.config.max_grad_norm)
        if not self.group.commit():
            loop.strategy.zero_grad()
            self.log(f"step {step + 1} did not commit (a group failed in it): the next quorum takes it again")
            return False
        loop.strategy.step()
        loop.schedule.step()
        loop.strategy.zero_grad()
        loop.step = self.group.step
        self.last_part = part
        hooks.point("committed", group=self.groups.group, rank=self.env.rank, step=step,
                    examples=examples[start:stop])
        run_log.tokens += tokens
        if run_log.due(loop.step, loop.step == loop.total):  # the quorum's changes are said as they happen
            run_log.trained(epoch=epoch + 1, epochs=loop.epochs_in_all, step=loop.step, total=loop.total,
                            loss=loss_sum / max(weight, 1), learning_rate=float(loop.schedule.get_last_lr()[0]))
        return True

    def backward(self, examples: list[int], start: int, stop: int, part: int, parts: int) -> tuple[float, int, int]:
        """Forward and backward over this rank's ``examples[start:stop]`` in batches of BATCH_SIZE, each batch's loss
        its sum (the model's mean times the batch's weight), the gradients left on this rank (ddp). Under fsdp every
        rank of the group runs as many batches (their collectives are in them): one with fewer runs the step's first
        example again, weighed 0; the last batch's backward reduce-scatters the group's gradients. This rank's summed
        loss, weight and tokens."""
        loop = self.loop
        size = loop.config.batch_size
        batches: list[tuple[list[int], bool]] = [(examples[first:min(first + size, stop)], True)
                                                 for first in range(start, stop, size)]
        sharded = loop.strategy.shards_parameters
        if sharded:
            rounds = self.group.most_batches(len(examples), part, parts, size)
            batches += [([examples[0]], False)] * (rounds - len(batches))
        loss_sum, weight, tokens = 0.0, 0, 0
        for number, (chosen, counted) in enumerate(batches):
            batch = {key: value.to(loop.device) for key, value in
                     loop.collate([loop.examples[index] for index in chosen]).items()}
            weighs = loop.weigh(batch) if counted else 0  # what the model's loss is a mean over
            with loop.precision.autocast():
                loss = loop.strategy.model(**batch).loss * weighs  # the mean, back to its sum
            if sharded and number + 1 == len(batches):
                loop.precision.backward(loss)
            else:
                with loop.strategy.local_gradients():
                    loop.precision.backward(loss)
            loss_sum, weight = loss_sum + float(loss.detach()), weight + weighs
            tokens += int(batch["attention_mask"].sum()) if counted else 0
        return loss_sum, weight, tokens

    def after_step(self, part: int, due: bool, run_log: RunLog, store: CheckpointStore, record: dict[str, Any],
                   evaluate: Evaluate) -> dict[str, float] | None:
        """At an epoch's end (or EVAL_STEPS) every group evaluates; the quorum's first group checkpoints there,
        every CHECKPOINT_EVERY_STEPS steps and when the group agreed CHECKPOINT_EVERY_SECONDS have passed; the
        others note the step they reached (a later failure is a fault after progress). The scores, if evaluated."""
        loop, step = self.loop, self.loop.step
        config = loop.config
        epoch_end = step % self.per_epoch == 0 or step == loop.total
        scores = None
        if epoch_end or (config.eval_steps and step % config.eval_steps == 0):
            scores, line = evaluate()
            run_log.evaluated(step, (step - 1) // self.per_epoch + 1, scores, line, within_epoch=not epoch_end)
        every = config.checkpoint_every_steps
        if scores is not None or due or (every and step % every == 0):
            if part == 0:
                loop.checkpoint(store, record)
                self.saved = step
            elif self.env.is_rank0:
                note_progress(f"step-{step}")
                loop.clock.restart()
        return scores


def save_on_leaving(replicated: ReplicatedLoop, store: CheckpointStore, record: dict[str, Any],
                    log: Callable[[str], None]) -> None:
    """A group that leaves after committing as its quorum's first group checkpoints the steps it holds: when every
    group is stopped at once (the Job deleted or preempted whole) the last one stepping is such a group, and no step
    since the cadence's checkpoint is lost; a group that leaves others stepping adds one checkpoint at most."""
    loop = replicated.loop
    if replicated.last_part != 0 or not replicated.group.committed or loop.step == replicated.saved:
        return
    loop.checkpoint(store, record, wait=True)
    log(f"{replicated.groups.replica_id} was its last quorum's first group: its {loop.step} steps checkpointed before "
        "it leaves")


def train(loop: Loop, groups: ReplicaGroups, env: DistEnv, log: Callable[[str], None], stop: StopRequest,
          store: CheckpointStore, record: dict[str, Any], evaluate: Evaluate,
          finish: Callable[[dict[str, Any]], None]) -> int:
    """The run as one replica group: its exit code. ``finish(summary)`` exports and writes the summary."""
    replicated = ReplicatedLoop(loop, groups, env, log)
    run_log = RunLog(env.rank, records_dir(loop.config.output_dir, groups), loop.config.log_interval,
                     loop.config.tensorboard, env.group_rank)
    log(f"{groups.replica_id}, {env.world_size} processes, of a job submitted with {groups.groups} replica groups "
        f"(at most {groups.max_replicas or groups.groups}): {replicated.per_epoch} steps per epoch of "
        f"{replicated.step_examples} examples")
    stop.defer()  # from here a SIGTERM ends the group between two steps, not inside one
    failed = True
    try:
        finished = replicated.train(run_log, stop, store, record, evaluate)
        failed = False
    except Left as left:
        failed = False
        log(f"stopped on request after step {left.step}: this group leaves, the others go on with its state "
            f"(exit {exit_codes.GROUP_LEFT})")
        save_on_leaving(replicated, store, record, log)
        return exit_codes.GROUP_LEFT
    finally:
        loop.writes.close(failed, log)
        run_log.close()
        replicated.group.close()
    log(f"{groups.replica_id}: {replicated.group.committed} of {replicated.group.attempted} steps it took committed "
        f"({finished.train_seconds:.1f} s); the job's {loop.total} steps are done")
    if writes_the_model(finished.last_part, lambda: stop.requested, lambda: is_finished(loop.config), loop.device,
                        log, groups.replica_id):
        finish({**finished.scores, "train_seconds": round(finished.train_seconds, 3), "step": loop.step,
                "replica_groups": groups.groups, **written_by(groups)})
    return exit_codes.OK


def refuse(config: Any, module: str) -> None:
    problems = refusals(config, module)
    if problems:
        raise Refusal(exit_codes.BAD_CONFIG, problems)
