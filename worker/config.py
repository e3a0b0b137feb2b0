"""Training configuration: environment variables (the Job's ConfigMap), overridden by command-line flags.

Every value is checked in one place; all problems are reported together, each naming the variable or flag,
and the process exits with exit_codes.BAD_CONFIG. This module does not import torch, so the Job's
check-config init container starts fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


class ConfigError(Exception):
    """One or more configuration problems, each a line naming its variable."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a positive number")
    return value


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false (1/0, yes/no)")


def _url(text: str) -> str:
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https", "file") or not (parsed.netloc or parsed.scheme == "file"):
        raise ValueError("must be an http(s):// or file:// base URL")
    return text if text.endswith("/") else text + "/"


def _path(text: str) -> Path:
    if not text.strip():
        raise ValueError("must not be empty")
    return Path(text)


def _optional_path(text: str) -> Path | None:
    return Path(text) if text.strip() else None


def _optional_url(text: str) -> str | None:
    return _url(text) if text.strip() else None


# STRATEGY's words and the class each names (worker/strategies/, imported only when chosen): a new strategy is
# its module there and one line here.
STRATEGY_CLASSES = {
    "allreduce": "worker.strategies.allreduce:AllReduceStrategy",
    "ddp": "worker.strategies.ddp:DDPStrategy",
    "fsdp": "worker.strategies.fsdp:FSDPStrategy",
}
STRATEGIES = tuple(STRATEGY_CLASSES)
PRECISIONS = ("fp32", "bf16", "fp16")


class _choice:  # noqa: N801 -- used like the parse functions beside it
    """Parses one of ``choices`` (any case); keeps them for the README table and the generator's check."""

    def __init__(self, *choices: str):
        self.choices = choices

    def __call__(self, text: str) -> str:
        value = text.strip().lower()
        if value not in self.choices:
            raise ValueError("must be one of " + ", ".join(self.choices))
        return value


def _setting(env: str, parse: Callable[[str], object], default: object, help: str, flag: str | None = None):
    """A dataclass field read from environment variable ``env`` or from ``--flag``."""
    return field(default=default, metadata={"env": env, "parse": parse, "help": help, "flag": flag})


@dataclass(frozen=True)
class TrainConfig:
    """Everything the training reads from its environment. The README's table is generated from this."""

    epochs: int = _setting("EPOCHS", _positive_int, 5, "Passes over the training set.")
    batch_size: int = _setting("BATCH_SIZE", _positive_int, 64, "Mini-batch size per process.")
    learning_rate: float = _setting("LEARNING_RATE", _positive_float, 0.004, "Peak learning rate of Adam under a one-cycle schedule.", "--lr")
    seed: int = _setting("SEED", _non_negative_int, 0, "Seed of the model's initialisation and of each epoch's shuffle.")
    strategy: str = _setting(
        "STRATEGY", _choice(*STRATEGIES), "allreduce",
        "How gradients are combined: allreduce (one flat all-reduce per step), ddp (DistributedDataParallel, "
        "bucketed and overlapped with backward) or fsdp (FSDP2, parameters, gradients and optimizer state "
        "sharded per layer; sharded checkpoints).")
    precision: str = _setting(
        "PRECISION", _choice(*PRECISIONS), "fp32",
        "fp32, bf16 (autocast; under fsdp its mixed-precision policy) or fp16 (with a gradient scaler; CUDA "
        "only). Weights, optimizer state and the gradient reduction stay fp32.")
    tensorboard: bool = _setting(
        "TENSORBOARD", _boolean, True,
        "Rank 0 writes TensorBoard event files to OUTPUT_DIR/tensorboard (`tensorboard --logdir OUTPUT_DIR`).")
    data_dir: Path = _setting("DATA_DIR", _path, Path("data"), "Where MNIST is (or is downloaded to): DATA_DIR/MNIST/raw/.")
    output_dir: Path = _setting("OUTPUT_DIR", _path, Path("runs/local"), "Checkpoints, metrics.jsonl, model.pt and model.json.")
    data_shared: bool = _setting(
        "DATA_SHARED", _boolean, True,
        "DATA_DIR is on a volume all pods share: only global rank 0 downloads. false: local rank 0 of each pod does.")
    download: bool = _setting("DOWNLOAD", _boolean, True, "Download MNIST when it is missing (false: fail instead).")
    mnist_mirror: str | None = _setting(
        "MNIST_MIRROR", _optional_url, None, "Base URL serving the four MNIST .gz files (air-gapped clusters); "
        "empty: torchvision's mirrors.")
    mnist_checksums: Path | None = _setting(
        "MNIST_CHECKSUMS", _optional_path, None, "A sha256sum-format file of the mirror's .gz files, for a mirror "
        "serving other files than the official ones; empty: the official MD5s.")
    mnist_sample_fallback: bool = _setting(
        "MNIST_SAMPLE_FALLBACK", _boolean, False,
        "When MNIST cannot be had, train on the sample shipped with the worker (the 10,000 MNIST test digits: "
        "8,000 to train, 2,000 to test) instead of failing; for a run on one machine (./run.sh --local sets it).")
    train_samples: int = _setting("TRAIN_SAMPLES", _non_negative_int, 0, "Train on the first N images only; 0: all.")
    log_interval: int = _setting("LOG_INTERVAL", _positive_int, 50, "Log every N batches (and the last one).")
    checkpoint_every: int = _setting("CHECKPOINT_EVERY", _non_negative_int, 1, "Checkpoint every N epochs; 0: never.")
    keep_checkpoints: int = _setting("KEEP_CHECKPOINTS", _positive_int, 3, "Checkpoints kept on the volume.")
    checkpoint_async: bool = _setting(
        "CHECKPOINT_ASYNC", _boolean, True,
        "Write checkpoints beside the training: it waits only while the state is copied (a stop's checkpoint is "
        "always written before the process exits).")
    resume: bool = _setting("RESUME", _boolean, True, "Resume from the newest valid checkpoint in OUTPUT_DIR.")
    collective_timeout: float = _setting(
        "COLLECTIVE_TIMEOUT", _positive_float, 300.0,
        "Seconds a collective may wait for a peer before the process gives up (exit 75).")
    download_timeout: float = _setting(
        "DOWNLOAD_TIMEOUT", _positive_float, 600.0,
        "Seconds the other ranks wait for the downloading rank before giving up (exit 75).")

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"


def config_fields() -> list[dataclasses.Field]:
    return list(dataclasses.fields(TrainConfig))


def variable_choices() -> dict[str, tuple[str, ...]]:
    """The variables that take one of a few words (STRATEGY, PRECISION), with their words."""
    return {item.metadata["env"]: item.metadata["parse"].choices for item in config_fields()
            if isinstance(item.metadata["parse"], _choice)}


def flag_name(item: dataclasses.Field) -> str:
    return item.metadata["flag"] or "--" + item.name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m worker",
        description="Train the MNIST CNN (under torchrun, or alone as one process). Every flag overrides the "
        "environment variable named in its help.",
    )
    for item in config_fields():
        parser.add_argument(flag_name(item), dest=item.name, default=None, metavar="VALUE",
                            help=f"{item.metadata['help']} [env {item.metadata['env']}]")
    parser.add_argument("--check-config", action="store_true",
                        help="Validate the variables and flags (and, under torchrun, the ranks against JOB_COMPLETION_INDEX), then exit (0, or 78).")
    return parser


def parse_value(item: dataclasses.Field, raw: str) -> Any:
    """``raw`` as setting ``item``'s value; ValueError saying what the value must be."""
    try:
        return item.metadata["parse"](raw)
    except ValueError as exc:
        if str(exc).startswith(("invalid literal", "could not convert")):  # int() and float()'s own words
            raise ValueError("must be a number" if item.type in ("float", float) else "must be a whole number") from None
        raise


def load_config(environ: Mapping[str, str], flags: Mapping[str, str | None] | None = None) -> TrainConfig:
    """Read every setting from ``flags`` (if given there) else ``environ`` else its default."""
    flags = flags or {}
    values, problems = {}, []
    for item in config_fields():
        env_name = item.metadata["env"]
        flag = flags.get(item.name)
        if flag is not None:
            raw, source = flag, f"{flag_name(item)}"
        elif env_name in environ:
            raw, source = environ[env_name], f"{env_name}"
        else:
            continue
        try:
            values[item.name] = parse_value(item, raw)
        except ValueError as exc:
            problems.append(f"{source}: {raw!r} {exc}")
    if problems:
        raise ConfigError(problems)
    return TrainConfig(**values)


def config_reference() -> str:
    """The worker's variables as a Markdown table (embedded in the README; a test keeps them equal)."""
    lines = ["| variable | flag | default | meaning |", "| --- | --- | --- | --- |"]
    for item in config_fields():
        default = item.default
        shown = "(empty)" if default is None else f"`{str(default).lower() if isinstance(default, bool) else default}`"
        lines.append(f"| `{item.metadata['env']}` | `{flag_name(item)}` | {shown} | {item.metadata['help']} |")
    return "\n".join(lines) + "\n"
