"""What a transformer run shows while it trains: a line every LOG_INTERVAL steps with the loss, this process's
tokens per second, the elapsed time and an ETA; rank 0's metrics.jsonl (a record per reported step and per
evaluation) and TensorBoard scalars; the live metrics each pod serves (trainer_runtime/metrics.py). A resumed run drops the records past its checkpoint first (TensorBoard's
purge_step does the same for the curves), so that no step is recorded twice and none is missing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trainer_contract.progress import format_duration, say
from trainer_runtime import metrics_file
from trainer_runtime.metrics import live
from trainer_runtime.tensorboard_log import Curves


class RunLog:
    def __init__(self, rank: int, output_dir: Path, log_interval: int, tensorboard: bool, node: int = 0):
        self.rank, self.output_dir, self.log_interval, self.node = rank, output_dir, log_interval, node
        self.live = live(log=self.log)
        self.tensorboard = tensorboard and rank == 0
        self.curves = Curves(False, output_dir, None, self.log)  # opened by start, where the run stands
        self.began = self.clock = time.monotonic()
        self.steps_before = self.tokens = 0

    def start(self, step: int, total: int, per_step: str = "") -> None:
        """Training starts (or resumes) at optimizer step ``step`` of ``total``; ``per_step``: what a step learns
        from, said beside."""
        self.began = self.clock = time.monotonic()
        self.steps_before = step
        self.live.started(step, output_dir=self.output_dir, node=self.node)
        self.live.progress(step, steps=total)
        if self.rank == 0:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            dropped = metrics_file.keep_up_to(self.output_dir, "step", step)
            if dropped:
                self.log(f"metrics.jsonl: dropped {dropped} record(s) after step {step}, which this start "
                          "trains again")
            self.curves = Curves(self.tensorboard, self.output_dir, step or None, self.log)  # x: the step
        self.log(f"training from step {step} of {total}{per_step}")

    def due(self, step: int, last_of_epoch: bool) -> bool:
        return step % self.log_interval == 0 or last_of_epoch

    def trained(self, *, epoch: int, epochs: int, step: int, total: int, loss: float, learning_rate: float) -> None:
        """A progress line and a record for optimizer step ``step``; ``loss`` is the mean since the last line."""
        now = time.monotonic()
        tokens_per_second = self.tokens / max(now - self.clock, 1e-9)
        self.tokens, self.clock = 0, now
        done, elapsed = step - self.steps_before, now - self.began
        eta = f"about {format_duration(elapsed / done * (total - step))} left" if done and step < total else "done"
        self.live.progress(step, steps=total, epoch=epoch, epochs=epochs)
        self.live.loss(loss)
        self.live.throughput(tokens_per_second, "tokens")
        self.log(f"epoch {epoch}/{epochs}, step {step}/{total}, loss {loss:.4f}, {tokens_per_second:.0f} "
            f"tokens/s, {format_duration(elapsed)} elapsed, {eta}")
        self.record({"step": step, "epoch": epoch, "loss": round(loss, 6), "learning_rate": learning_rate,
                     "tokens_per_second": round(tokens_per_second, 1)},
                    {"train/loss": loss, "train/learning_rate": learning_rate,
                     "train/tokens_per_second": tokens_per_second})

    def evaluated(self, step: int, epoch: int, scores: dict[str, float], words: str, within_epoch: bool = False) -> None:
        """``words``: the scores as the line says them (every rank holds the same; rank 0 says them), at an epoch's
        end or ``within_epoch`` (EVAL_STEPS). The record keeps the seconds since this start's training began
        (evaluations included): the time to a score."""
        for metric, value in scores.items():
            self.live.evaluation(metric, value)
        if self.rank == 0:
            self.log(f"epoch {epoch}{f', step {step}' if within_epoch else ''}, evaluation: {words}")
        self.record({"step": step, "epoch": epoch, **{key: round(value, 4) for key, value in scores.items()},
                     "seconds": round(time.monotonic() - self.began, 3)},
                    {f"eval/{key}": value for key, value in scores.items()})

    def record(self, line: dict[str, Any], scalars: dict[str, float]) -> None:
        if self.rank != 0:
            return
        metrics_file.append(self.output_dir, line)
        self.curves.add(scalars, line["step"], flush=True)

    def log(self, message: str) -> None:
        say(self.rank, message)

    def close(self) -> None:
        self.curves.close()
        self.live.close()
