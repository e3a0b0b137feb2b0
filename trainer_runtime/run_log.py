"""What a run shows while it trains, every program's one writer of it: each rank's lines (``Rank N: ...``), the live
metrics each pod serves (trainer_runtime/metrics.py), rank 0's metrics.jsonl (trainer_runtime/metrics_file.py) and
TensorBoard curves (trainer_runtime/tensorboard_log.py). A start drops the records past the checkpoint it resumes
from and opens the curves there (TensorBoard's purge), so that no point is recorded twice and none is missing.

``RunLog`` is that, with the transformer workloads' step cadence (a line and a record every LOG_INTERVAL optimizer
steps with the loss, this process's tokens per second, the elapsed time and an ETA; one per evaluation); MNIST's
epoch cadence stands on it (trainer_runtime/progress.py)."""

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
        self.is_rank0 = rank == 0
        self.tensorboard = tensorboard and self.is_rank0
        self.live = live(log=self.log)
        self.curves = Curves(False, output_dir, None, self.log)  # opened where the run stands (open_curves)
        self.began = self.clock = time.monotonic()
        self.steps_before = self.tokens = 0

    # -- every program's --------------------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        say(self.rank, message)

    def log0(self, message: str) -> None:
        if self.is_rank0:
            self.log(message)

    def keep_records_up_to(self, key: str, last: int, said: str) -> None:
        """Rank 0, as training starts: metrics.jsonl keeps the records whose ``key`` is at most ``last``, where the
        checkpoint resumed from stands; those after it (``said``) this start trains and records again."""
        if not self.is_rank0:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        dropped = metrics_file.keep_up_to(self.output_dir, key, last)
        if dropped:
            self.log(f"metrics.jsonl: dropped {dropped} record(s) {said}, which this start trains again")

    def open_curves(self, resume_at: int | None) -> None:
        """Rank 0's curves, from the x of the checkpoint resumed from (None: a fresh run)."""
        if self.is_rank0:
            self.curves = Curves(self.tensorboard, self.output_dir, resume_at, self.log)

    def due(self, step: int, last: bool) -> bool:
        """Whether step ``step`` (from 1) is reported: every LOG_INTERVAL steps and the last of its stretch."""
        return step % self.log_interval == 0 or last

    def timing(self, done: int, left: int) -> str:
        """This start's elapsed time and the time left for ``left`` steps at the pace of the ``done`` it took."""
        elapsed = time.monotonic() - self.began
        eta = format_duration(elapsed / done * left) if done > 0 else "unknown"
        return f"{format_duration(elapsed)} elapsed, {'done' if not left else 'about ' + eta + ' left'}"

    def record(self, line: dict[str, Any], scalars: dict[str, float], x: int) -> None:
        """Rank 0: ``line`` appended to metrics.jsonl, ``scalars`` on the curves at ``x``, both on disk now."""
        if not self.is_rank0:
            return
        metrics_file.append(self.output_dir, line)
        self.curves.add(scalars, x, flush=True)

    def close(self) -> None:
        self.curves.close()
        self.live.close()

    # -- the transformer workloads' step cadence --------------------------------------------------------------------
    def start(self, step: int, total: int, per_step: str = "") -> None:
        """Training starts (or resumes) at optimizer step ``step`` of ``total``; ``per_step``: what a step learns
        from, said beside."""
        self.began = self.clock = time.monotonic()
        self.steps_before = step
        self.live.started(step, output_dir=self.output_dir, node=self.node)
        self.live.progress(step, steps=total)
        self.keep_records_up_to("step", step, f"after step {step}")
        self.open_curves(step or None)  # x: the optimizer step
        self.log(f"training from step {step} of {total}{per_step}")

    def trained(self, *, epoch: int, epochs: int, step: int, total: int, loss: float, learning_rate: float) -> None:
        """A progress line and a record for optimizer step ``step``; ``loss`` is the mean since the last line."""
        now = time.monotonic()
        tokens_per_second = self.tokens / max(now - self.clock, 1e-9)
        self.tokens, self.clock = 0, now
        self.live.progress(step, steps=total, epoch=epoch, epochs=epochs)
        self.live.loss(loss)
        self.live.throughput(tokens_per_second, "tokens")
        self.log(f"epoch {epoch}/{epochs}, step {step}/{total}, loss {loss:.4f}, {tokens_per_second:.0f} tokens/s, "
                 f"{self.timing(step - self.steps_before, total - step)}")
        self.record({"step": step, "epoch": epoch, "loss": round(loss, 6), "learning_rate": learning_rate,
                     "tokens_per_second": round(tokens_per_second, 1)},
                    {"train/loss": loss, "train/learning_rate": learning_rate,
                     "train/tokens_per_second": tokens_per_second}, step)

    def evaluated(self, step: int, epoch: int, scores: dict[str, float], words: str, within_epoch: bool = False) -> None:
        """``words``: the scores as the line says them (every rank holds the same; rank 0 says them), at an epoch's
        end or ``within_epoch`` (EVAL_STEPS). The record keeps the seconds since this start's training began
        (evaluations included): the time to a score."""
        for metric, value in scores.items():
            self.live.evaluation(metric, value)
        self.log0(f"epoch {epoch}{f', step {step}' if within_epoch else ''}, evaluation: {words}")
        self.record({"step": step, "epoch": epoch, **{key: round(value, 4) for key, value in scores.items()},
                     "seconds": round(time.monotonic() - self.began, 3)},
                    {f"eval/{key}": value for key, value in scores.items()}, step)
