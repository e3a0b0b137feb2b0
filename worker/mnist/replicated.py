"""The MNIST worker as one replica group of several (REPLICA_GROUPS; trainer_runtime/replica_groups.py): the groups
in each step's quorum share its examples, a failed group costs that group, and a group that joins takes the
weights from a peer.

A step takes the epoch's next BATCH_SIZE x processes per group x REPLICA_GROUPS examples, in the order of the
uninterrupted run, whichever groups step; the learning rate follows the committed steps. The last step's first
group writes the model; under a Job the others wait for the Job to complete with it (its successPolicy ends them),
one writing it in its stead where it is lost for good (trainer_runtime.replica_groups.writes_the_model).

Checkpoints are for a loss of every group at once: the quorum's first group writes one every
CHECKPOINT_EVERY_SECONDS (the MNIST worker's format and names, its world size the processes of every group, so a
gang of that size resumes it too), and a group that starts finds the newest, at whose step it asks to join: the
quorum goes on from the furthest of its groups.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F

from trainer_contract import exit_codes, hooks
from trainer_contract.checkpoint_layout import Position
from trainer_contract.gang_rounds import note_progress
from trainer_contract.launcher import BUILT_IN_WORKER
from trainer_contract.program_settings import TrainConfig
from trainer_contract.replica_groups import ReplicaGroups, setting_problems, written_by
from trainer_runtime.checkpoints.found import Checkpoint
from trainer_runtime.checkpoints.manager import CheckpointManager
from trainer_runtime.checkpoints.state import TrainingState
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import Refusal
from trainer_runtime.finished_run import is_finished
from trainer_runtime.gang import from_rank0
from trainer_runtime.metrics import live
from trainer_runtime.replica_groups import Left, ReplicaGroup, missing_torchft, stepping, writes_the_model
from trainer_runtime.sampler import RankBatches
from trainer_runtime.stop import Terminated, agreed
from worker.mnist import finished_run, resume
from worker.mnist.train import Trainer


class ReplicatedTraining:
    """The Trainer's set-up, data, model and evaluation; the steps of the job's quorums."""

    def __init__(self, trainer: Trainer, groups: ReplicaGroups):
        self.trainer, self.groups = trainer, groups
        config, env = trainer.config, trainer.env
        trainer._load_data(trainer._join_gang())
        trainer._build_model()  # every group starts from SEED's weights; a group that joins later takes its peer's
        self.model, self.optimizer, self.log0 = trainer.model, trainer.optimizer, trainer.log0
        self.world_size = env.world_size * groups.groups  # every group's processes: the checkpoints' world size
        self.step_examples = config.batch_size * self.world_size
        self.steps_per_epoch = math.ceil(len(trainer.images) / self.step_examples)
        self.total = config.epochs * self.steps_per_epoch
        trainer.checkpoints = CheckpointManager(
            trainer.store, every=0, epochs=config.epochs, rank=env.rank, sharded_format=False,
            asynchronous=config.checkpoint_async, every_seconds=config.checkpoint_every_seconds)
        first = self.resume()
        self.scheduler = trainer.make_scheduler(first)
        self.order = RankBatches(len(trainer.images), self.step_examples, 0, 1, config.seed, True, pad=False)
        self.epoch_order: tuple[int, torch.Tensor] | None = None
        self.last_part = 0  # this group's part of the last step it committed (0: the quorum's first group)
        self.saved = -1  # the step of this group's newest checkpoint
        self.group = ReplicaGroup(groups, env, trainer.device, self.state, self.load, self.log0, first)
        self.parameters = [p for p in self.model.parameters() if p.requires_grad]
        self.log0(f"{groups.replica_id}, {env.world_size} processes, of a job submitted with {groups.groups} replica "
                  f"groups (at most {groups.max_replicas or groups.groups}): {self.steps_per_epoch} steps per epoch of "
                  f"{self.step_examples} examples, strategy {config.strategy}")

    def resume(self) -> int:
        """The step this group starts at: the newest checkpoint's (restored), else 0. Rank 0 reads the volume for
        its group; a refused checkpoint (another shaping setting) is every rank's configuration error."""
        trainer, config = self.trainer, self.trainer.config
        found = from_rank0(trainer.env, lambda: self._newest())
        if found is None:
            return 0
        trainer.checkpoints.restore(found, trainer.parallel)
        position = found.state.position
        if position.step and found.state.steps_per_epoch != self.steps_per_epoch:
            position = Position(position.epoch, 0)  # as a gang's resume: that epoch starts over
        self.log0(f"resuming from {found.path.name}")
        return min(position.epoch * self.steps_per_epoch + position.step, config.epochs * self.steps_per_epoch)

    def _newest(self) -> Checkpoint | None:
        """The volume's newest checkpoint this run may resume (another group may be writing the next one: its
        temporaries are left to it, and RESUME=false is refused before)."""
        found = self.trainer.checkpoints.load_newest()
        problems = [] if found is None else resume.refusals(self.trainer.config, self.world_size, found)
        if problems:
            raise Refusal(exit_codes.BAD_CONFIG, problems)
        return found

    def save(self, step: int) -> None:
        """A checkpoint after ``step`` steps (rank 0 of the quorum's first group, when CHECKPOINT_EVERY_SECONDS
        have passed), written beside the training with CHECKPOINT_ASYNC."""
        trainer = self.trainer
        epoch, within = divmod(step, self.steps_per_epoch)
        state = TrainingState(
            position=Position(epoch, within), steps_per_epoch=self.steps_per_epoch, world_size=self.world_size,
            config=finished_run.recorded_config(trainer.config), strategy=trainer.config.strategy,
            scaler=trainer.parallel.precision.state_dict(), started_at=trainer.started_at)
        trainer.checkpoints.save(state, trainer.parallel)
        self.saved = step

    def save_on_leaving(self, step: int) -> None:
        """A group that leaves (SIGTERM, between two steps) after committing as its quorum's first group checkpoints
        the ``step`` steps it holds: when every group is stopped at once (the Job deleted or preempted whole) the
        last one stepping is such a group, and no step since the cadence's checkpoint is lost; a group that leaves
        others stepping adds one checkpoint at most."""
        if self.last_part != 0 or not self.group.committed or step == self.saved:
            return
        if self.trainer.env.is_rank0:
            self.save(step)
            self.log0(f"{self.groups.replica_id} was its last quorum's first group: its {step} steps checkpointed "
                      "before it leaves")
        self.trainer.checkpoints.wait()

    def state(self) -> dict[str, Any]:
        """What a joining group takes from a peer."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict()}

    def load(self, recovered: dict[str, Any]) -> None:
        self.model.load_state_dict(recovered["model"])
        self.optimizer.load_state_dict(recovered["optimizer"])
        self.scheduler.load_state_dict(recovered["scheduler"])

    def examples(self, step: int) -> torch.Tensor:
        """The examples of the job's step ``step``: the same whichever groups take it."""
        epoch, within = divmod(step, self.steps_per_epoch)
        if self.epoch_order is None or self.epoch_order[0] != epoch:
            self.order.set_epoch(epoch)
            self.epoch_order = epoch, torch.tensor(self.order.share(), device=self.trainer.device)
        return self.epoch_order[1][within * self.step_examples:(within + 1) * self.step_examples]

    def train(self) -> bool:
        """Step with the quorums until the job's last step; False where the job had finished before this group
        joined."""
        self.trainer.checkpoints.clock.restart()  # CHECKPOINT_EVERY_SECONDS count training time, from here
        live().started(self.group.step, output_dir=self.trainer.config.output_dir,
                       node=self.groups.group, steps_per_epoch=self.steps_per_epoch)
        self.trainer.stop.defer()  # from here a SIGTERM ends the group between two steps, not inside one
        while self.group.step < self.total:
            if agreed((self.trainer.stop.requested,), self.trainer.device)[0]:
                raise Left(self.group.step)
            part, parts = self.group.begin()
            # alone at its first quorum, a group may have started once the others finished the job: it must not
            # train it again (one read of the finished run, only then)
            if self.group.attempted == 1 and parts < self.groups.groups and is_finished(self.trainer.config):
                self.log0(f"{self.groups.replica_id}: the job finished while this group set up; nothing to do")
                return False
            self.take_step(part, parts)
        return True

    def take_step(self, part: int, parts: int) -> None:
        """This rank's share of the step, the gradients summed over every group, the optimizer's step if it
        commits (else the next quorum takes the same step again)."""
        step = self.group.step
        examples = self.examples(step)
        start, stop = self.group.mine(len(examples), part, parts)
        chosen = examples[start:stop]
        epoch, within = divmod(step, self.steps_per_epoch)
        hooks.point("batch", epoch=epoch + 1, batch=within + 1)
        self.optimizer.zero_grad(set_to_none=False)
        loss = None
        if len(chosen):
            loss = F.cross_entropy(self.model(self.trainer.images[chosen]), self.trainer.labels[chosen],
                                   reduction="sum")
            loss.backward()
        self.group.sum_gradients(self.parameters, len(chosen))  # the step's examples, whichever groups take it
        if not self.group.commit():
            self.log0(f"step {step + 1} did not commit (a group failed in it): the next quorum takes it again")
            return
        self.optimizer.step()
        self.scheduler.step()
        self.last_part = part
        clock = self.trainer.checkpoints.clock
        if self.trainer.env.is_rank0 and step + 1 < self.total and clock.due():
            if part == 0:
                self.save(step + 1)
            else:  # the others note the steps they took: a later failure of this group is a fault after progress
                note_progress(f"step-{step + 1}")
                clock.restart()
        hooks.point("committed", group=self.groups.group, rank=self.trainer.env.rank, step=step,
                    examples=chosen.tolist())
        self.report(step, epoch, within, loss, len(chosen), parts)

    def report(self, step: int, epoch: int, within: int, loss: torch.Tensor | None, count: int, parts: int) -> None:
        last_of_epoch = within + 1 == self.steps_per_epoch
        metrics = live()
        if (step + 1) % self.trainer.config.log_interval == 0 or last_of_epoch:
            mean = float(loss.detach()) / count if loss is not None else float("nan")
            self.log0(f"step {step + 1}/{self.total} (epoch {epoch + 1}), loss={mean:.4f} on this rank's {count} "
                      f"examples, {stepping(parts, self.groups.groups)}")
            metrics.progress(step + 1, steps=self.total, epoch=epoch + 1, epochs=self.trainer.config.epochs)
            if loss is not None:
                metrics.loss(mean)
        if last_of_epoch:
            correct, tested = self.trainer.evaluate_gang()
            self.log0(f"epoch {epoch + 1}/{self.trainer.config.epochs}, test accuracy={correct / max(tested, 1):.4f}")
            metrics.evaluation("accuracy", correct / max(tested, 1))

    def finish(self, seconds: float) -> None:
        """Say what this group did; the last step's first group evaluates and writes the model (one group of many:
        trainer_runtime.replica_groups.writes_the_model)."""
        trainer = self.trainer
        self.log0(f"{self.groups.replica_id}: {self.group.committed} of {self.group.attempted} steps it took "
                  f"committed ({seconds:.1f} s); the job's {self.total} steps are done")
        if not writes_the_model(self.last_part, lambda: trainer.stop.requested, lambda: is_finished(trainer.config),
                                trainer.device, self.log0, self.groups.replica_id):
            return
        correct, tested = trainer.evaluate_gang()
        trainer.checkpoints.wait()  # the last checkpoint is on disk before the model (the mark of a finished run)
        if trainer.env.is_rank0:
            trainer.write_model(trainer.parallel.full_model_state(), {"accuracy": correct / max(tested, 1)},
                                trainer.env.world_size * self.groups.groups, replica_groups=self.groups.groups,
                                **written_by(self.groups))


def _refusals(config: TrainConfig) -> list[str]:
    return missing_torchft() or setting_problems(BUILT_IN_WORKER, config)


def train_run(config: TrainConfig, env: DistEnv, log, store: CheckpointStore, groups: ReplicaGroups) -> int:
    """The run in every program's shell (trainer_runtime.run_shell), as one replica group: its exit code."""
    problems = _refusals(config)
    if problems:
        raise Refusal(exit_codes.BAD_CONFIG, problems)
    trainer = Trainer(config, env, store)
    training = None
    try:
        training = ReplicatedTraining(trainer, groups)
        started = time.perf_counter()
        if training.train():
            training.finish(time.perf_counter() - started)
            trainer.log("training completed.")
            hooks.point("completed")
        return exit_codes.OK
    except Terminated as stopped:  # set-up: the group holds nothing yet
        trainer.log(f"stopped: {stopped} while setting up; this group leaves (exit {exit_codes.GROUP_LEFT})")
        return exit_codes.GROUP_LEFT
    except Left as left:
        trainer.log(f"stopped on request after step {left.step}: this group leaves, the others go on with its state "
                    f"(exit {exit_codes.GROUP_LEFT})")
        if training is not None:
            training.save_on_leaving(left.step)
        return exit_codes.GROUP_LEFT
    finally:
        if training is not None:
            training.group.close()
        trainer.close(False)
