"""The training run of one process: set up, resume, train (gradients combined by the STRATEGY, computed in the
PRECISION), evaluate, checkpoint, and stop cleanly (all ranks together) on SIGTERM."""

from __future__ import annotations

import io
import json
import os
import sys
import time
import warnings
from dataclasses import asdict
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

from worker import (
    checkpoint,
    data,
    exit_codes,
    hooks,
    precision,
    process_group,
    settings,
    sharded_checkpoint,
    strategies,
)
from worker.atomic import atomic_write
from worker.checkpoint import Position
from worker.config import ConfigError, TrainConfig
from worker.distenv import DistEnv
from worker.model import MnistCNN, parameter_count
from worker.stop import StopRequest, Terminated
from worker.tensorboard_log import Curves
from worker.threads import threads_per_process

EVAL_CHUNK = 1000  # test images per forward pass


class Stopped(Exception):
    """The ranks agreed to stop early (SIGTERM somewhere in the gang); the checkpoint is written."""

    def __init__(self, signalled_here: bool):
        super().__init__("stopped on request")
        self.exit_code = exit_codes.TERMINATED if signalled_here else exit_codes.PEER_LOST


class AlreadyComplete(Exception):
    """OUTPUT_DIR holds the finished run with these settings: nothing to do, nothing to write."""


class Trainer:
    def __init__(self, config: TrainConfig, env: DistEnv):
        self.config, self.env = config, env
        self.stop = StopRequest()
        self.distributed = env.world_size > 1
        self.curves = Curves(False, config.output_dir, None, self.log)  # opened once the verdict is known

    # -- output -------------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        # one write per line: the gang's processes share torchrun's stdout, and a separate write of the
        # newline lets another rank's line land in between
        sys.stdout.write(f"Rank {self.env.rank}: {message}\n")
        sys.stdout.flush()

    def log0(self, message: str) -> None:
        if self.env.is_rank0:
            self.log(message)

    # -- setup --------------------------------------------------------------------------------------
    def setup(self) -> None:
        cfg, env = self.config, self.env
        torch.set_num_threads(threads_per_process(env.local_world_size, os.environ.get("OMP_NUM_THREADS")))
        use_cuda = torch.cuda.is_available() and env.local_rank < torch.cuda.device_count()
        self.device = torch.device("cuda", env.local_rank) if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(self.device)
        precision.require_supported(cfg.precision, self.device)  # before any rendezvous: every rank exits 78
        hooks.point("start", rank=env.rank, output_dir=cfg.output_dir, under_launcher=env.under_launcher,
                    log=self.log)
        store = None
        backend = "nccl" if use_cuda else "gloo"
        if self.distributed:
            process_group.init_process_group(
                backend, timeout=timedelta(seconds=cfg.collective_timeout),
                device_id=self.device if use_cuda else None,
            )
            store = dist.distributed_c10d._get_default_store()
            self.log0(f"process group: {backend}, world size {env.world_size} "
                      f"({env.nodes} nodes x {env.local_world_size}), {torch.get_num_threads()} threads each")
        elif cfg.strategy != "allreduce":  # DDP and FSDP need a process group, also of one process
            process_group.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        self.start_state = self.inspect_output()
        self.data_source = data.prepare(cfg, env, store, self.log)
        images, labels = data.load_split(cfg.data_dir, train=True, limit=cfg.train_samples, source=self.data_source)
        test_images, test_labels = data.load_split(cfg.data_dir, train=False, source=self.data_source)
        self.images, self.labels = images.to(self.device), labels.to(self.device)
        # each rank evaluates its own slice of the test set; the counts are summed
        self.test_images = test_images[env.rank::env.world_size].to(self.device)
        self.test_labels = test_labels[env.rank::env.world_size].to(self.device)
        self.test_count = len(test_images)
        self.steps = data.steps_per_epoch(len(self.images), env.world_size, cfg.batch_size)

        torch.manual_seed(cfg.seed)
        model = MnistCNN().to(self.device)
        self.parameters = parameter_count(model)
        if self.distributed:  # identical start everywhere, whatever each host's RNG did
            for tensor in model.state_dict().values():
                dist.broadcast(tensor, src=0)
        self.parallel = strategies.build(cfg.strategy, model, env, self.device, cfg.precision)
        self.model = self.parallel.module  # the plain model (sharded in place under fsdp)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.learning_rate)
        self.parallel.attach(self.optimizer)
        self.log0(f"{len(self.images)} training images, {len(test_images)} test images, "
                  f"{self.parameters} parameters, {self.steps} steps per epoch on {self.device}, "
                  f"strategy {cfg.strategy}, precision {cfg.precision}")

    def make_scheduler(self, done_steps: int):
        total = self.config.epochs * self.steps
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.optimizer, max_lr=self.config.learning_rate, total_steps=max(total, 2), pct_start=0.15)
        with warnings.catch_warnings():  # replaying the schedule without optimizer steps is intended
            warnings.simplefilter("ignore")
            for _ in range(min(done_steps, total - 1)):
                scheduler.step()
        return scheduler

    # -- checkpoints ---------------------------------------------------------------------------------
    def inspect_output(self) -> dict | None:
        """Rank 0 looks at OUTPUT_DIR and every rank learns its verdict: the checkpoint state to resume from
        (or None to start afresh); AlreadyComplete if the finished run is there; ConfigError if the run there
        was made with other settings. Nothing is written before this verdict."""
        verdict = self._inspect_output() if self.env.is_rank0 else None
        if self.distributed:
            box = [verdict]
            dist.broadcast_object_list(box, src=0, device=self.device if self.device.type == "cuda" else None)
            verdict = box[0]
        assert verdict is not None  # rank 0's, broadcast to every rank
        if verdict["kind"] == "refused":
            raise ConfigError(verdict["problems"])
        if verdict["kind"] == "complete":
            self.log0(settings.describe(verdict["summary"], self.config.output_dir))
            raise AlreadyComplete()
        if verdict["kind"] == "resume" and self.env.is_rank0:
            for stale in checkpoint.remove_stale_temporaries(self.config.checkpoint_dir):
                self.log(f"removed {stale.name}, left by an interrupted checkpoint write")
        return verdict.get("state")

    def _inspect_output(self) -> dict:
        cfg, env = self.config, self.env
        if not cfg.resume:
            return {"kind": "fresh"}
        summary = settings.finished_run(cfg)
        if summary is not None:
            problems = settings.changed_settings(summary["config"], cfg, f"the finished run in {cfg.output_dir}")
            return {"kind": "refused", "problems": problems} if problems else {"kind": "complete", "summary": summary}
        found = checkpoint.load_newest(cfg.checkpoint_dir, log=self.log)
        if not found:
            return {"kind": "resume", "state": None}
        state, path = found
        problems = settings.changed_settings(state.get("config", {}), cfg, f"checkpoint {path.name}")
        position = Position(**state["position"])
        if position.step and state["world_size"] != env.world_size:
            problems[:0] = [
                f"WORLD_SIZE: checkpoint {path.name} was taken in the middle of epoch {position.epoch + 1} (after "
                f"batch {position.step}) with {state['world_size']} processes, now {env.world_size}: the rest of "
                f"that epoch's shards cannot be dealt to another number of processes. Run this epoch with "
                f"{state['world_size']} processes (replicas x processes per pod), or remove {path.name} to "
                f"resume from the start of epoch {position.epoch + 1}"]
        if problems:
            return {"kind": "refused", "problems": problems}
        self.log(f"resuming from {path.name}")
        return {"kind": "resume", "state": state}

    def resume(self) -> tuple[Position, float, float, dict]:
        """Load the checkpoint every rank received; (position, loss, samples, result of the last epoch)."""
        state = self.start_state
        if state is None:
            return Position(0, 0), 0.0, 0.0, {}
        if "sharded" in state:
            self.parallel.load_sharded(state["sharded"])
        else:
            self.parallel.load_full(state["model"], state["optimizer"])
        self.parallel.precision.load_state_dict(state.get("scaler"))
        position = Position(**state["position"])
        if position.step and state["steps_per_epoch"] != self.steps:
            self.log0(f"the checkpoint was taken with {state['steps_per_epoch']} steps per epoch, now {self.steps}: "
                      f"epoch {position.epoch + 1} starts over")
            position = Position(position.epoch, 0)
        carried = state["epoch_loss_sum"] if (position.step and self.env.is_rank0) else 0.0
        samples = state["epoch_samples"] if (position.step and self.env.is_rank0) else 0.0
        return position, carried, samples, state.get("result") or {}

    def save_checkpoint(self, position: Position, loss_sum: float = 0.0, samples: float = 0.0,
                        result: dict | None = None) -> None:
        """Rank 0 writes one verified file; under fsdp every rank writes its shard of a checkpoint directory."""
        if not (self.env.is_rank0 or self.parallel.sharded_checkpoints):
            return
        meta = {
            "position": asdict(position),
            "epoch_loss_sum": loss_sum,
            "epoch_samples": samples,
            "steps_per_epoch": self.steps,
            "world_size": self.env.world_size,
            "config": settings.recorded_config(self.config),
            "result": result,  # the last finished epoch's metrics: a run resumed at its end reports them
            "strategy": self.config.strategy,
            "scaler": self.parallel.precision.state_dict(),
        }
        started = time.perf_counter()
        hooks.point("checkpoint")
        if self.parallel.sharded_checkpoints:
            path = sharded_checkpoint.save(self.parallel.sharded_state(), meta, self.config.checkpoint_dir, position,
                                           self.config.keep_checkpoints, self.env.rank)
        else:
            model_state, optimizer_state = self.parallel.full_state()
            path = checkpoint.save({**meta, "model": model_state, "optimizer": optimizer_state},
                                   self.config.checkpoint_dir, position, self.config.keep_checkpoints)
        self.log0(f"checkpoint {path.name} written ({time.perf_counter() - started:.2f} s)")

    # -- the loop -----------------------------------------------------------------------------------
    def all_sum(self, values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.distributed:
            dist.all_reduce(tensor)
        return tensor.tolist()

    def evaluate(self) -> tuple[int, int]:
        self.model.eval()
        correct = 0
        # the same number of forward passes on every rank: under fsdp each one gathers parameters from all
        largest_shard = -(-self.test_count // self.env.world_size)
        with torch.no_grad(), self.parallel.precision.autocast():  # no_grad: FSDP2 cannot run in inference_mode
            for start in range(0, largest_shard, EVAL_CHUNK):
                logits = self.model(self.test_images[start:start + EVAL_CHUNK])
                correct += int((logits.argmax(1) == self.test_labels[start:start + EVAL_CHUNK]).sum())
        self.model.train()
        return correct, len(self.test_images)

    def train(self) -> dict:
        cfg, env = self.config, self.env
        position, carried_loss, carried_samples, result = self.resume()
        scheduler = self.make_scheduler(position.epoch * self.steps + position.step)
        batch, count = cfg.batch_size, len(self.images)
        if env.is_rank0:
            resumed = self.start_state is not None
            self.curves = Curves(cfg.tensorboard, cfg.output_dir, self.images_seen(position) if resumed else None,
                                 self.log)
        self.stop.defer()  # from here a signal is agreed on by the gang and checkpointed, not raised
        self.model.train()
        parallel = self.parallel
        for epoch in range(position.epoch, cfg.epochs):
            indices = data.shard_indices(count, env.world_size, env.rank, cfg.seed, epoch).to(self.device)
            first = position.step if epoch == position.epoch else 0
            loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
            local_samples, global_samples, sync_seconds, backward_seconds = 0, 0, 0.0, 0.0
            started = time.perf_counter()
            for step in range(first, self.steps):
                hooks.point("batch", epoch=epoch + 1, batch=step + 1)
                chosen = indices[step * batch:(step + 1) * batch]
                expected = (data.images_before_step(count, env.world_size, batch, step + 1)
                            - data.images_before_step(count, env.world_size, batch, step))
                parallel.zero_grad()
                loss = None
                if len(chosen) or parallel.forwards_empty_batches:
                    with parallel.precision.autocast():
                        logits = parallel.model(self.images[chosen])
                    loss = F.cross_entropy(logits.float(), self.labels[chosen], reduction="sum")
                    loss_sum += loss.detach()
                backward_started = time.perf_counter()
                step_samples, stop = parallel.backward(loss, len(chosen), expected, self.stop.requested)
                backward_seconds += time.perf_counter() - backward_started
                sync_seconds += parallel.sync_seconds
                parallel.step()
                scheduler.step()
                local_samples += len(chosen)
                global_samples += step_samples
                if (step + 1) % cfg.log_interval == 0 or step + 1 == self.steps:
                    self.log(f"epoch: {epoch + 1}/{cfg.epochs}, batch: {step + 1}/{self.steps}, "
                             f"mini-batch size: {len(chosen)}")
                    if env.is_rank0 and loss is not None and len(chosen):
                        self.curves.batch(self.images_seen(Position(epoch, step + 1)), float(loss.detach()) / len(chosen),
                                          scheduler.get_last_lr()[0])
                if stop:
                    total_loss, total_samples = self.all_sum([float(loss_sum), local_samples])
                    self.log0(f"stop requested: checkpointing epoch {epoch + 1} at batch {step + 1}")
                    self.save_checkpoint(Position(epoch, step + 1), total_loss + carried_loss,
                                         total_samples + carried_samples)
                    raise Stopped(self.stop.requested)
            train_seconds = time.perf_counter() - started
            local_correct, local_tested = self.evaluate()
            total_loss, total_samples, correct, tested, stop_votes = self.all_sum(
                [float(loss_sum), local_samples, local_correct, local_tested, float(self.stop.requested)])
            stop = stop_votes > 0
            total_loss += carried_loss
            total_samples += carried_samples
            carried_loss = carried_samples = 0.0
            average = total_loss / max(total_samples, 1)
            accuracy = correct / max(tested, 1)
            self.log(f"epoch {epoch + 1}/{cfg.epochs}, average epoch loss={average:.4f}")
            steps_run = max(self.steps - first, 1)
            result = {
                "epoch": epoch + 1,
                "loss": round(average, 6),
                "accuracy": round(accuracy, 6),
                "learning_rate": scheduler.get_last_lr()[0],
                "images_per_second": round(global_samples / train_seconds, 1),
                "train_seconds": round(train_seconds, 3),
                "sync_ms_per_step": round(1000 * sync_seconds / steps_run, 3),
                "backward_ms_per_step": round(1000 * backward_seconds / steps_run, 3),  # sync included
                "world_size": env.world_size,
                "strategy": cfg.strategy,
                "precision": cfg.precision,
            }
            self.log0(f"epoch {epoch + 1}/{cfg.epochs}, test accuracy={100 * accuracy:.2f}%, "
                      f"{result['images_per_second']:.0f} images/s, gradient sync "
                      f"{result['sync_ms_per_step']:.2f} ms/step (backward with sync {result['backward_ms_per_step']:.1f})")
            last = epoch + 1 == cfg.epochs
            if stop:
                self.log0(f"stop requested: checkpointing at the end of epoch {epoch + 1}")
            if stop or last or (cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0):
                self.save_checkpoint(Position(epoch + 1, 0), result=result)
            self.append_metrics(result)
            if env.is_rank0:
                self.curves.epoch(self.images_seen(Position(epoch + 1, 0)), result)
            if stop and not last:
                raise Stopped(self.stop.requested)
        return result

    def images_seen(self, position: Position) -> int:
        """Training images processed by all ranks up to ``position``: the curves' x-axis."""
        count = len(self.images)
        return position.epoch * count + data.images_before_step(count, self.env.world_size, self.config.batch_size,
                                                                 position.step)

    def append_metrics(self, record: dict) -> None:
        if not self.env.is_rank0:
            return
        path = self.config.output_dir / "metrics.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(json.dumps({**record, "time": round(time.time(), 3)}) + "\n")
            handle.flush()

    def save_model(self, result: dict) -> None:
        """Rank 0 writes model.pt, then model.json (the mark of a finished run); every rank waits for it, so no
        pod of the gang leaves before the model is on the volume (an index that succeeds never has to come back
        while rank 0 could still fail)."""
        # plain tensors on rank 0, gathered from every rank under fsdp
        weights = self.parallel.full_model_state() if self.env.is_rank0 or self.parallel.sharded_checkpoints else None
        if self.env.is_rank0:
            buffer = io.BytesIO()
            torch.save(weights, buffer)
            atomic_write(self.config.output_dir / settings.MODEL_WEIGHTS, buffer.getvalue())
            summary_path = self.config.output_dir / settings.MODEL_SUMMARY
            summary = {
                **_read_json(summary_path),  # a field it had is never lost
                "accuracy": result.get("accuracy"),
                "loss": result.get("loss"),
                "epochs": self.config.epochs,
                "world_size": self.env.world_size,
                "parameters": self.parameters,
                "model": "worker.model.MnistCNN",
                "data": self.data_source,  # mnist, or mnist-sample (the digits shipped with the worker)
                "config": settings.recorded_config(self.config),
            }
            atomic_write(summary_path, (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode())
            self.log(f"model saved to {self.config.output_dir / settings.MODEL_WEIGHTS} (test accuracy "
                     f"{100 * (result.get('accuracy') or 0):.2f}%)")
        if self.distributed:
            dist.barrier()

    def close(self) -> None:
        self.curves.close()
        process_group.destroy_process_group()


def _read_json(path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def run(config: TrainConfig, env: DistEnv) -> int:
    """Train; return the process exit code (see worker.exit_codes)."""
    trainer = Trainer(config, env)
    try:
        trainer.setup()
        result = trainer.train()
        trainer.save_model(result)
        trainer.log("training completed.")
        hooks.point("completed")
        return exit_codes.OK
    except AlreadyComplete:
        return exit_codes.OK
    except ConfigError as error:
        for problem in error.problems:
            trainer.log(f"configuration error: {problem}")
        trainer.log(f"exiting with code {exit_codes.BAD_CONFIG} (bad configuration); nothing was written")
        return exit_codes.BAD_CONFIG
    except Terminated as terminated:
        trainer.log(f"stopped: {terminated} before training started; nothing to save")
        return exit_codes.TERMINATED
    except Stopped as stopped:
        trainer.log("stopped: " + ("SIGTERM received here" if stopped.exit_code == exit_codes.TERMINATED
                                   else "a peer was asked to stop; the gang restarts from the checkpoint"))
        return stopped.exit_code
    except data.DataError as exc:
        trainer.log(f"error: data unavailable: {exc}")
        return exit_codes.DATA_UNAVAILABLE
    except data.PeerLost as exc:
        trainer.log(f"error: {exc}")
        return exit_codes.PEER_LOST
    except (dist.DistError, RuntimeError) as exc:
        if not _is_communication_error(exc):
            raise
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if env.is_rank0 and _is_timeout(exc):
            # a peer that stops answering exits nowhere (or only with 75): the leader's exit is what counts
            # this gang restart against the Job's backoffLimit, once
            trainer.log(f"error: a peer stopped answering ({first_line}); exiting so that the gang restarts "
                        "from the last checkpoint")
            return exit_codes.STALLED
        trainer.log(f"error: lost contact with a peer ({first_line}); exiting so that the gang restarts "
                    "from the last checkpoint")
        return exit_codes.PEER_LOST
    finally:
        trainer.stop.defer()  # a second signal must not interrupt the clean-up
        trainer.close()


def _is_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text


def _is_communication_error(exc: BaseException) -> bool:
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc).lower()
    return any(word in text for word in ("gloo", "nccl", "connection", "timed out", "timeout", "peer", "socket",
                                         "broken pipe", "store"))
