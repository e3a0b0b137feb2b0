"""The training run of one process: set up, resume, train (gradients combined by the STRATEGY, computed in the
PRECISION), evaluate, checkpoint, and stop cleanly (all ranks together) on SIGTERM."""

from __future__ import annotations

import io
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer_contract import exit_codes, hooks
from trainer_contract.atomic import atomic_write
from trainer_contract.checkpoint_layout import Position
from trainer_contract.program_settings import TrainConfig
from trainer_runtime import process_group, strategies
from trainer_runtime.checkpoints.found import Checkpoint
from trainer_runtime.checkpoints.manager import CheckpointManager
from trainer_runtime.checkpoints.state import TrainingState
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import Refusal
from trainer_runtime.gang import from_rank0, join, record_attempt
from trainer_runtime.gradsync import StepAgreement
from trainer_runtime.progress import Progress
from trainer_runtime.resume import take_up
from trainer_runtime.run_shell import usage_log
from trainer_runtime.run_summary import write_summary
from trainer_runtime.sampler import RankBatches
from trainer_runtime.sharded_evaluation import evaluating, gang_sum, rank_batches
from trainer_runtime.stop import Stopped, StopRequest
from worker.mnist import data, finished_run, resume
from worker.mnist.metrics import EpochTally, epoch_record
from worker.mnist.model import MnistCNN, parameter_count

# Test images per forward pass: 1000 held 230 MiB of conv activations at every rank's peak; 128 and 64 slowed
# the next epoch's training by a fifth on this CPU (oneDNN; measured with python -m bench's throughput row).
EVAL_CHUNK = 250


class Trainer:
    """Sets a run up and delegates: the step (``train_step``), evaluation (``evaluate``), checkpoints
    (trainer_runtime.checkpoints: format, cadence, verification), what a start finds (worker.mnist.resume), and the lines,
    curves and metrics (trainer_runtime.progress, worker.mnist.metrics)."""

    def __init__(self, config: TrainConfig, env: DistEnv, store: CheckpointStore):
        self.config, self.env, self.store = config, env, store  # the run's checkpoint store (run_shell)
        self.stop = StopRequest()
        self.distributed = env.world_size > 1
        self.progress = Progress(env.rank, config.output_dir, config.epochs, config.log_interval, env.group_rank,
                                 config.tensorboard)
        self.started_at = time.time()  # the run's first start: a resumed run takes its checkpoint's
        self.log, self.log0 = self.progress.log, self.progress.log0

    # -- setup --------------------------------------------------------------------------------------
    def setup(self) -> None:
        """The device and the gang, the start (resume, complete or fresh), the data, the model."""
        cfg = self.config
        rendezvous = self._join_gang()
        self.checkpoints = CheckpointManager(
            self.store, every=cfg.checkpoint_every, epochs=cfg.epochs, rank=self.env.rank,
            sharded_format=strategies.shards_parameters(cfg.strategy), asynchronous=cfg.checkpoint_async,
            every_seconds=cfg.checkpoint_every_seconds, nodes=self.env.nodes)
        self.checkpoint = self.decide_start()
        self.usage = usage_log(cfg, self.env).start()
        record_attempt(self.env, cfg.output_dir)
        self._load_data(rendezvous)
        self._build_model()
        self.log0(f"{len(self.images)} training images, {self.test_count} test images, "
                  f"{self.parameters} parameters, {self.steps} steps per epoch on {self.device}, "
                  f"strategy {cfg.strategy}, precision {cfg.precision}")

    def _join_gang(self):
        """Choose the device and join the process group; the rendezvous' store (None for one process)."""
        gang = join(self.config, self.env, self.log, group_of_one=self.config.strategy != "allreduce")
        self.device = gang.device
        return gang.store

    def _load_data(self, rendezvous) -> None:
        cfg, env = self.config, self.env
        try:
            self.data_source = data.prepare(cfg, env, rendezvous, self.log)
            images, labels = data.load_split(cfg.data_dir, True, limit=cfg.train_samples, source=self.data_source)
            test_images, test_labels = data.load_split(cfg.data_dir, train=False, source=self.data_source)
        except data.DataError as exc:
            raise Refusal(exit_codes.DATA_UNAVAILABLE, [f"data unavailable: {exc}"]) from None
        self.images, self.labels = images.to(self.device), labels.to(self.device)
        self.test_images, self.test_labels = test_images.to(self.device), test_labels.to(self.device)
        self.test_count = len(test_images)
        # every image once an epoch, no padding: a step's loss is summed and divided by the gang's count
        self.batches = RankBatches(len(images), cfg.batch_size, env.rank, env.world_size, cfg.seed, True, pad=False)
        self.steps = len(self.batches)

    def _build_model(self) -> None:
        cfg = self.config
        torch.manual_seed(cfg.seed)
        model = MnistCNN().to(self.device)
        self.parameters = parameter_count(model)
        if self.distributed:  # identical start everywhere, whatever each host's RNG did
            for tensor in model.state_dict().values():
                dist.broadcast(tensor, src=0)
        self.parallel = strategies.build(cfg.strategy, model, self.env, self.device, cfg.precision)
        self.model = self.parallel.module  # the plain model (sharded in place under fsdp)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.learning_rate)
        self.parallel.attach(self.optimizer)

    def make_scheduler(self, done_steps: int):
        total = self.config.epochs * self.steps
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.optimizer, max_lr=self.config.learning_rate, total_steps=max(total, 2), pct_start=0.15)
        with warnings.catch_warnings():  # replaying the schedule without optimizer steps is intended
            warnings.simplefilter("ignore")
            for _ in range(min(done_steps, total - 1)):
                scheduler.step()
        return scheduler

    def decide_start(self) -> Checkpoint | None:
        """Rank 0 takes up what OUTPUT_DIR holds (trainer_runtime.resume) and every rank learns the checkpoint to
        resume, or the refusal; nothing is written before."""
        cfg, world_size = self.config, self.env.world_size
        self.store.restore_from_bucket(cfg.resume, self.env)
        found = from_rank0(self.env, lambda: take_up(
            cfg, self.store, self.checkpoints.load_newest, lambda found: resume.refusals(cfg, world_size, found),
            (finished_run.MODEL_SUMMARY, finished_run.MODEL_WEIGHTS), self.log, True))
        if found is not None:
            self.log0(f"resuming from {found.path.name}")
        return found

    def training_state(self, position: Position, loss_sum: float = 0.0, samples: float = 0.0,
                       result: dict | None = None) -> TrainingState:
        return TrainingState(
            position=position, steps_per_epoch=self.steps, world_size=self.env.world_size,
            epoch_loss_sum=loss_sum, epoch_samples=samples, config=finished_run.recorded_config(self.config),
            result=result, strategy=self.config.strategy, scaler=self.parallel.precision.state_dict(),
            started_at=self.started_at)

    # -- the loop -----------------------------------------------------------------------------------
    def all_sum(self, values: list[float]) -> list[float]:
        return gang_sum(torch.tensor(values, dtype=torch.float64, device=self.device), self.env.world_size).tolist()

    def train(self) -> dict:
        checkpoint = self.checkpoint
        if checkpoint is not None:
            restoring = time.perf_counter()
            self.checkpoints.restore(checkpoint, self.parallel)
            self.started_at = checkpoint.state.started_at or self.started_at
            self.log0(f"restored {checkpoint.path.name} ({time.perf_counter() - restoring:.2f} s)")
        start = resume.resume_point(checkpoint, self.steps, self.env.is_rank0, self.log0)
        scheduler = self.make_scheduler(start.position.epoch * self.steps + start.position.step)
        self.progress.open_curves(self.images_seen(start.position) if checkpoint is not None else None)
        self.progress.begin(start.position.epoch, start.position.step, self.steps)
        self.progress.keep_epochs_up_to(start.position.epoch)
        self.stop.defer()  # from here a signal is agreed on by the gang and checkpointed, not raised
        self.checkpoints.clock.restart()  # CHECKPOINT_EVERY_SECONDS count training time, from here
        self.model.train()
        carried_loss, carried_samples, result = start.carried_loss, start.carried_samples, start.result
        for epoch in range(start.position.epoch, self.config.epochs):
            first = start.position.step if epoch == start.position.epoch else 0
            tally = self.train_epoch(epoch, first, scheduler, carried_loss, carried_samples)
            result = self.end_epoch(epoch, tally, scheduler, carried_loss, carried_samples)
            carried_loss = carried_samples = 0.0
        return result

    def train_epoch(self, epoch: int, first: int, scheduler, carried_loss: float,
                    carried_samples: float) -> EpochTally:
        """Steps ``first``.. of ``epoch``; checkpoint where it stands when the gang agrees that
        CHECKPOINT_EVERY_SECONDS have passed (but the epoch's last step: its end checkpoints), and on a stop agreed
        by the gang, then raise Stopped."""
        self.batches.set_epoch(epoch)
        indices = torch.tensor(self.batches.share(), device=self.device)
        tally = EpochTally(first, torch.zeros((), dtype=torch.float64, device=self.device))
        for step in range(first, self.steps):
            hooks.point("batch", epoch=epoch + 1, batch=step + 1)
            chosen = indices[step * self.config.batch_size:(step + 1) * self.config.batch_size]
            loss, agreed = self.train_step(step, chosen, tally)
            scheduler.step()
            if self.progress.due(step + 1, step + 1 == self.steps):  # float(loss) waits for the device: only here
                self.progress.batch(epoch, step + 1, self.steps, len(chosen), None if loss is None else float(loss),
                                    scheduler.get_last_lr()[0], self.images_seen(Position(epoch, step + 1)))
            if agreed.stop:
                self.log0(f"stop requested: checkpointing epoch {epoch + 1} at batch {step + 1}")
                self.save_mid_epoch(Position(epoch, step + 1), tally, carried_loss, carried_samples, wait=True)
                raise Stopped(f"epoch {epoch + 1}, batch {step + 1}")
            if agreed.checkpoint and step + 1 < self.steps:
                self.save_mid_epoch(Position(epoch, step + 1), tally, carried_loss, carried_samples, wait=False)
        return tally

    def save_mid_epoch(self, position: Position, tally: EpochTally, carried_loss: float, carried_samples: float,
                       wait: bool) -> None:
        """Checkpoint ``position`` inside its epoch with the gang's running loss and samples (so that the resumed
        epoch reports the uninterrupted one's average); every rank calls it in the same step."""
        total_loss, total_samples = self.all_sum([float(tally.loss_sum), tally.local_samples])
        self.checkpoints.save(self.training_state(position, total_loss + carried_loss,
                                                  total_samples + carried_samples), self.parallel, wait=wait)

    def train_step(self, step: int, chosen: torch.Tensor,
                   tally: EpochTally) -> tuple[torch.Tensor | None, StepAgreement]:
        """Forward, backward (gradients combined by the strategy), optimizer step on this rank's ``chosen``
        images; returns this rank's summed loss (None where it forwarded nothing) and what the gang agreed (a stop,
        a checkpoint by time)."""
        parallel = self.parallel
        expected = self.batches.examples_before(step + 1) - self.batches.examples_before(step)
        parallel.zero_grad()
        loss = None
        if len(chosen) or parallel.forwards_empty_batches:
            with parallel.precision.autocast():
                logits = parallel.model(self.images[chosen])
            loss = F.cross_entropy(logits.float(), self.labels[chosen], reduction="sum")
            tally.loss_sum += loss.detach()
        backward_started = time.perf_counter()
        agreed = parallel.backward(loss, len(chosen), expected, self.stop.requested, self.checkpoints.clock.due())
        tally.backward_seconds += time.perf_counter() - backward_started
        tally.sync_seconds += parallel.sync_seconds
        parallel.step()
        tally.local_samples += len(chosen)
        tally.global_samples += agreed.samples
        return (None if loss is None else loss.detach()), agreed

    def evaluate(self) -> tuple[int, int]:
        """This rank's test images right and counted (trainer_runtime.sharded_evaluation)."""
        correct = tested = 0
        with evaluating(self.model), self.parallel.precision.autocast():
            for (images, labels), counted in rank_batches(EVAL_CHUNK, self.env.rank, self.env.world_size,
                                                          self.test_images, self.test_labels):
                hits = int((self.model(images).argmax(1) == labels).sum())
                correct, tested = (correct + hits, tested + len(labels)) if counted else (correct, tested)
        return correct, tested

    def end_epoch(self, epoch: int, tally: EpochTally, scheduler, carried_loss: float,
                  carried_samples: float) -> dict:
        """Evaluate, agree on the totals (and on a stop and a checkpoint by time), report, checkpoint when due;
        Stopped if the gang stops before the last epoch."""
        cfg = self.config
        train_seconds = time.perf_counter() - tally.started
        local_correct, local_tested = self.evaluate()
        total_loss, total_samples, correct, tested, stop_votes, time_votes = self.all_sum(
            [float(tally.loss_sum), tally.local_samples, local_correct, local_tested, float(self.stop.requested),
             float(self.checkpoints.clock.due())])
        stop = stop_votes > 0
        average = (total_loss + carried_loss) / max(total_samples + carried_samples, 1)
        accuracy = correct / max(tested, 1)
        result = epoch_record(epoch + 1, average, accuracy, scheduler.get_last_lr()[0], tally, train_seconds,
                              self.steps, self.env.world_size, cfg.strategy, cfg.precision)
        self.progress.epoch(result, average, accuracy)
        last = epoch + 1 == cfg.epochs
        if stop:
            self.log0(f"stop requested: checkpointing at the end of epoch {epoch + 1}")
        if self.checkpoints.due(epoch + 1, stop, time_agreed=time_votes > 0):
            self.checkpoints.save(self.training_state(Position(epoch + 1, 0), result=result), self.parallel,
                                  wait=stop)  # a stop's checkpoint is on disk before the process exits
        self.progress.record_epoch(result, self.images_seen(Position(epoch + 1, 0)))
        if stop and not last:
            raise Stopped(f"the end of epoch {epoch + 1}")
        return result

    def images_seen(self, position: Position) -> int:
        """Training images processed by all ranks up to ``position``: the curves' x-axis."""
        return position.epoch * len(self.images) + self.batches.examples_before(position.step)

    def evaluate_gang(self) -> tuple[int, int]:
        """The gang's test images right and counted."""
        correct, tested = self.evaluate()
        total_correct, total_tested = self.all_sum([correct, tested])
        return int(total_correct), int(total_tested)

    def save_model(self, result: dict) -> None:
        """Rank 0 writes model.pt, then model.json (the mark of a finished run); every rank waits for it, so no
        pod of the gang leaves before the model is on the volume (an index that succeeds never has to come back
        while rank 0 could still fail)."""
        self.checkpoints.wait()  # the last checkpoint is on disk before the model (the mark of a finished run)
        # plain tensors on rank 0, gathered from every rank under fsdp
        weights = self.parallel.full_model_state() if self.env.is_rank0 or self.parallel.shards_parameters else None
        if self.env.is_rank0:
            self.write_model(weights, result, self.env.world_size)
        if self.distributed:
            dist.barrier()

    def write_model(self, weights: dict | None, result: dict, world_size: int, **recorded) -> None:
        """model.pt, then model.json (the mark of a finished run) and the export, by the one process that writes
        them; ``recorded``: more of the run for model.json."""
        buffer = io.BytesIO()
        torch.save(weights, buffer)
        atomic_write(self.config.output_dir / finished_run.MODEL_WEIGHTS, buffer.getvalue())
        write_summary(self.config.output_dir / finished_run.MODEL_SUMMARY, {
            "accuracy": result.get("accuracy"), "loss": result.get("loss"), "epochs": self.config.epochs,
            "world_size": world_size, "parameters": self.parameters, "model": "worker.mnist.model.MnistCNN",
            "data": self.data_source,  # mnist, or mnist-sample (the digits shipped with the worker)
            "config": finished_run.recorded_config(self.config), **recorded}, self.started_at)
        self.log(f"model saved to {self.config.output_dir / finished_run.MODEL_WEIGHTS} (test accuracy "
                 f"{result.get('accuracy') or 0:.4f})")
        if self.config.export_dir is not None:
            names = finished_run.write_export(self.config.output_dir, self.config.export_dir)
            self.log(f"model exported to {self.config.export_dir} ({', '.join(names)})")

    def close(self, failed: bool) -> None:
        if hasattr(self, "checkpoints"):
            self.checkpoints.close(failed)
        if hasattr(self, "usage"):
            self.usage.stop()
        self.progress.close()
        process_group.destroy_process_group()


def train(config: TrainConfig, env: DistEnv, log, store: CheckpointStore) -> int:
    """The run inside the shell (``log`` is the shell's; the Trainer's progress writes the same lines): set up,
    train, save the model; its exit code, or a failure the shell maps to one (worker.mnist.program runs it)."""
    trainer = Trainer(config, env, store)
    failed = True
    try:
        trainer.setup()
        result = trainer.train()
        trainer.save_model(result)
        trainer.log("training completed.")
        hooks.point("completed")
        failed = False
        return exit_codes.OK
    except Stopped as stopped:
        failed = False  # its checkpoint is written (synchronously)
        return trainer.stop.ended(stopped, trainer.log)
    finally:
        trainer.stop.defer()  # a second signal must not interrupt the clean-up
        trainer.close(failed)
