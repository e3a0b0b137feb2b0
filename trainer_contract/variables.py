"""The built-in programs' variables, stated once and without torch: each with its type, default, range or
choices, help and whether a resume may change it (the config dataclasses' fields), read by the programs
(trainer_contract/config_reading.py), checked at render time by the generator, shown in the generated tables of
docs/worker.md and docs/reference.md; and the variables no values file may set.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

from trainer_contract.checkpoint_layout import CHECKPOINT_DIR_VARIABLE, EPOCH_STEP, OPTIMIZER_STEP, OWN_PROGRAM, Naming


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


def _name(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be 0 or a positive number")
    return value


def _optional_url(text: str) -> str | None:
    return _url(text) if text.strip() else None


# STRATEGY's words (trainer_runtime/strategies/ maps each to its class) and PRECISION's.
STRATEGIES = ("allreduce", "ddp", "fsdp")
PRECISIONS = ("fp32", "bf16", "fp16")


class _choice:  # noqa: N801 -- used like the parse functions beside it
    """Parses one of ``choices`` (any case); keeps them for the generated tables and the generator's check."""

    def __init__(self, *choices: str):
        self.choices = choices

    def __call__(self, text: str) -> str:
        value = text.strip().lower()
        if value not in self.choices:
            raise ValueError("must be one of " + ", ".join(self.choices))
        return value


def _setting(env: str, parse: Callable[[str], object], default: object, help: str, flag: str | None = None,
             shaping: bool = False):
    """A dataclass field read from environment variable ``env`` or from ``--flag``. ``shaping``: a change makes a
    resumed run another run (its schedule, batches, examples or seed), so a resume with another value is refused
    (shaping_settings; the workloads' resume checks read it, no list of names elsewhere)."""
    return field(default=default, metadata={"env": env, "parse": parse, "help": help, "flag": flag,
                                            "shaping": shaping})


# Checkpoints by time, every program alike; each program's default says why it suits its checkpoint's cost.
def _checkpoint_every_seconds(default: float, why: str):
    return _setting("CHECKPOINT_EVERY_SECONDS", _non_negative_float, default,
                    "Checkpoint, mid-epoch too, once this many seconds of training have passed since the last "
                    "checkpoint, so that a fault costs at most about that much training whatever an epoch lasts "
                    "(rank 0's clock, agreed by every rank in the step's own collective); 0: off. " + why)


@dataclass(frozen=True)
class TrainConfig:
    """Everything the MNIST worker reads from its environment. docs/worker.md's table is generated from this."""

    epochs: int = _setting("EPOCHS", _positive_int, 5, "Passes over the training set.", shaping=True)
    batch_size: int = _setting("BATCH_SIZE", _positive_int, 64, "Mini-batch size per process.", shaping=True)
    learning_rate: float = _setting("LEARNING_RATE", _positive_float, 0.004, "Peak learning rate of Adam under a one-cycle schedule.", "--lr",
                                    shaping=True)
    seed: int = _setting("SEED", _non_negative_int, 0, "Seed of the model's initialisation and of each epoch's shuffle.",
                         shaping=True)
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
    export_dir: Path | None = _setting(
        "EXPORT_DIR", _optional_path, None,
        "Rank 0 exports the trained model here when training ends (model.pt, model.json, metrics.jsonl and a "
        "README.md model card); export.storage_uri sets it and uploads it; empty: no export.")
    mnist_sample_fallback: bool = _setting(
        "MNIST_SAMPLE_FALLBACK", _boolean, False,
        "When MNIST cannot be had, train on the sample shipped with the worker (the 10,000 MNIST test digits: "
        "8,000 to train, 2,000 to test) instead of failing; for a run on one machine (./run.sh --local sets it).")
    train_samples: int = _setting("TRAIN_SAMPLES", _non_negative_int, 0, "Train on the first N images only; 0: all.",
                                  shaping=True)
    log_interval: int = _setting("LOG_INTERVAL", _positive_int, 50, "Log every N batches (and the last one).")
    checkpoint_every: int = _setting("CHECKPOINT_EVERY", _non_negative_int, 1,
                                     "Checkpoint every N epochs and after the last; 0: after the last only.")
    checkpoint_every_seconds: float = _checkpoint_every_seconds(
        30.0, "30 s: an asynchronous checkpoint of this model stalls the training for milliseconds, and a recovery "
        "itself takes seconds: what a fault costs stays of the recovery's order.")
    keep_checkpoints: int = _setting(
        "KEEP_CHECKPOINTS", _positive_int, 3, "Checkpoints kept on the volume, and the newest at an epoch's start "
        "beside them (another world size resumes only from one).")
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
    # how its checkpoints are named (trainer_contract/checkpoint_layout.py): the volume's and the bucket's
    checkpoint_naming: ClassVar[Naming] = EPOCH_STEP

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"


# The settings the transformer workloads (QaConfig, FinetuneConfig) read alike, each defined once.
def _workload_output_dir(task: str):
    return _setting("OUTPUT_DIR", _path, Path("runs/local"), "Checkpoints, metrics.jsonl, TensorBoard's events, the "
                    f"usage log and <model type>_{task}_trained/.")


def _workload_export_dir(task: str):
    return _setting("EXPORT_DIR", _optional_path, None,
                    "Where rank 0 writes the trained model and tokenizer (`save_pretrained`); export.storage_uri sets "
                    f"it and uploads it; empty: OUTPUT_DIR/<model type>_{task}_trained.")


def _log_interval():
    return _setting("LOG_INTERVAL", _positive_int, 50, "Log every N steps (and the epoch's last).")


def _keep_checkpoints():
    return _setting("KEEP_CHECKPOINTS", _positive_int, 2, "Checkpoints kept on the volume.")


def _resume():
    return _setting("RESUME", _boolean, True, "Resume from the newest checkpoint in OUTPUT_DIR/checkpoints (refused if "
                    "the model, the tokenizer or a shaping setting changed).")


def _tensorboard():
    return _setting("TENSORBOARD", _boolean, True, "Rank 0 writes TensorBoard event files to OUTPUT_DIR/tensorboard.")


def _usage_log_seconds():
    return _setting("USAGE_LOG_SECONDS", _positive_float, 5.0, "Every process appends a line of GPU (or CPU and "
                    "memory) use to OUTPUT_DIR/logs/usage-rank<R>.log this often.")


def _checkpoint_every_steps(default: int):
    return _setting("CHECKPOINT_EVERY_STEPS", _non_negative_int, default,
                    "Checkpoint every N optimizer steps as well as at each epoch's end; 0: none by steps.")


def _workload_checkpoint_every_seconds():
    return _checkpoint_every_seconds(
        300.0, "300 s: the training waits while its checkpoint is written, and a checkpoint can be large (LoRA's "
        "adapters are MiB, a whole model's weights with their optimizer state three times the weights); every "
        "five minutes, a write of 6 s costs 2% of the training. Raise it where a write takes longer.")


def _collective_timeout():
    return _setting("COLLECTIVE_TIMEOUT", _positive_float, 300.0,
                    "Seconds a collective may wait for a peer before the process gives up.")


@dataclass(frozen=True)
class QaConfig:
    """The question-answering workload's variables (`python -m worker.qa`, BERT on SQuAD with Lightning): what it
    shares with the MNIST worker (epochs, batch size, strategy, precision, the directories, checkpoints) reads the
    same variable the same way; the rest is its own. docs/reference.md's table comes from here."""

    model_dir: Path = _setting(
        "MODEL_DIR", _path, Path("model"),
        "The pretrained model and its tokenizer, as `save_pretrained` writes them (any "
        "AutoModelForQuestionAnswering); initializer.model.storage_uri stages it here.")
    dataset_dir: Path = _setting(
        "DATASET_DIR", _path, Path("data"),
        "SQuAD-format data: train-v1.1.json and dev-v1.1.json (or train.json and validation.json), or the Hub "
        "dataset's parquet files (plain_text/train-*.parquet, plain_text/validation-*.parquet); "
        "initializer.dataset.storage_uri stages it here.")
    output_dir: Path = _workload_output_dir("squad")
    export_dir: Path | None = _workload_export_dir("squad")
    epochs: int = _setting("EPOCHS", _positive_int, 2, "Passes over the training questions.", shaping=True)
    batch_size: int = _setting("BATCH_SIZE", _positive_int, 16, "Features (question and context window) per "
                               "process and step.", shaping=True)
    learning_rate: float = _setting("LEARNING_RATE", _positive_float, 3e-5,
                                    "Peak learning rate of AdamW, decayed linearly to 0.", "--lr", shaping=True)
    seed: int = _setting("SEED", _non_negative_int, 0, "Seed of the shuffle and of the new answer layer.", shaping=True)
    strategy: str = _setting(
        "STRATEGY", _choice("fsdp", "ddp"), "fsdp",
        "fsdp (FSDP2 through Lightning: parameters, gradients and optimizer state sharded per transformer layer) "
        "or ddp (DistributedDataParallel).")
    precision: str = _setting(
        "PRECISION", _choice(*PRECISIONS), "fp32",
        "fp32, bf16 (autocast; under fsdp its mixed-precision policy) or fp16 (CUDA only).")
    max_seq_length: int = _setting("MAX_SEQ_LENGTH", _positive_int, 384,
                                   "Tokens per feature: question and a window of its context.", shaping=True)
    doc_stride: int = _setting("DOC_STRIDE", _positive_int, 128,
                               "Tokens the windows of a long context share.", shaping=True)
    max_answer_length: int = _setting("MAX_ANSWER_LENGTH", _positive_int, 30,
                                      "Longest answer, in tokens, the evaluation may predict.")
    train_samples: int = _setting("TRAIN_SAMPLES", _non_negative_int, 0, "Train on the first N questions; 0: all.",
                                  shaping=True)
    eval_samples: int = _setting("EVAL_SAMPLES", _non_negative_int, 0, "Evaluate on the first N questions; 0: all.")
    log_interval: int = _log_interval()
    checkpoint_every_steps: int = _checkpoint_every_steps(0)
    checkpoint_every_seconds: float = _workload_checkpoint_every_seconds()
    keep_checkpoints: int = _keep_checkpoints()
    resume: bool = _resume()
    tensorboard: bool = _tensorboard()
    usage_log_seconds: float = _usage_log_seconds()
    collective_timeout: float = _collective_timeout()
    checkpoint_naming: ClassVar[Naming] = OPTIMIZER_STEP

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"


@dataclass(frozen=True)
class FinetuneConfig:
    """The text-classification workload (`python -m worker.finetune`): a pretrained Hub model fine-tuned for text
    classification with plain PyTorch, DistributedDataParallel and automatic mixed precision. A seed's config.yaml
    of hyper-parameters sets these by their lower-case names (values' hyperparameters_file)."""

    model_dir: Path = _setting(
        "MODEL_DIR", _path, Path("model"),
        "The pretrained model and its tokenizer, as `save_pretrained` writes them (any "
        "AutoModelForSequenceClassification; a new classification head is made for the dataset's labels); "
        "initializer.model.storage_uri stages it here.")
    dataset_dir: Path = _setting(
        "DATASET_DIR", _path, Path("data"),
        "Labelled texts: a train split and a validation (or test) split, each as parquet (the Hub's "
        "plain_text/train-*.parquet), CSV or JSON lines files named after the split; "
        "initializer.dataset.storage_uri stages it here.")
    output_dir: Path = _workload_output_dir("classifier")
    export_dir: Path | None = _workload_export_dir("classifier")
    text_column: str = _setting("TEXT_COLUMN", _name, "text", "The column holding each example's text.", shaping=True)
    text_pair_column: str = _setting("TEXT_PAIR_COLUMN", str, "",
                                     "A second text per example (sentence pairs); empty: none.", shaping=True)
    label_column: str = _setting("LABEL_COLUMN", _name, "label",
                                 "The column holding each example's label: class numbers from 0, or names.",
                                 shaping=True)
    epochs: int = _setting("EPOCHS", _positive_int, 3, "Passes over the training texts.", shaping=True)
    batch_size: int = _setting("BATCH_SIZE", _positive_int, 16, "Texts per process and step.", shaping=True)
    learning_rate: float = _setting("LEARNING_RATE", _positive_float, 2e-5,
                                    "Peak learning rate of AdamW, after the warm-up, decayed linearly to 0.", "--lr",
                                    shaping=True)
    weight_decay: float = _setting("WEIGHT_DECAY", _non_negative_float, 0.01,
                                   "AdamW's weight decay (not applied to biases and norms).", shaping=True)
    warmup_steps: int = _setting("WARMUP_STEPS", _non_negative_int, 0,
                                 "Optimizer steps over which the learning rate rises linearly from 0.", shaping=True)
    max_grad_norm: float = _setting("MAX_GRAD_NORM", _non_negative_float, 1.0,
                                    "Clip the gradients' global norm to this; 0: no clipping.")
    seed: int = _setting("SEED", _non_negative_int, 0, "Seed of the shuffle, the dropout and the new head.",
                         shaping=True)
    precision: str = _setting(
        "PRECISION", _choice(*PRECISIONS), "fp32",
        "fp32, bf16 (autocast, on CPUs and GPUs) or fp16 (autocast and a gradient scaler, CUDA only).")
    max_seq_length: int = _setting("MAX_SEQ_LENGTH", _positive_int, 128, "Tokens per text (longer ones are cut).",
                                   shaping=True)
    train_samples: int = _setting("TRAIN_SAMPLES", _non_negative_int, 0, "Train on the first N texts; 0: all.",
                                  shaping=True)
    eval_samples: int = _setting("EVAL_SAMPLES", _non_negative_int, 0, "Evaluate on the first N texts; 0: all.")
    log_interval: int = _log_interval()
    checkpoint_every_steps: int = _checkpoint_every_steps(500)
    checkpoint_every_seconds: float = _workload_checkpoint_every_seconds()
    keep_checkpoints: int = _keep_checkpoints()
    resume: bool = _resume()
    tensorboard: bool = _tensorboard()
    usage_log_seconds: float = _usage_log_seconds()
    collective_timeout: float = _collective_timeout()
    checkpoint_naming: ClassVar[Naming] = OPTIMIZER_STEP

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"


@dataclass(frozen=True)
class SftConfig:
    """Supervised fine-tuning of a causal language model (`python -m worker.sft`): any AutoModelForCausalLM with
    LoRA adapters (peft) or whole, on prompt/completion or chat data, DDP or FSDP2 with automatic mixed precision."""

    model_dir: Path = _setting(
        "MODEL_DIR", _path, Path("model"),
        "The pretrained causal LM and its tokenizer, as `save_pretrained` writes them (safetensors); "
        "initializer.model.storage_uri stages it here.")
    dataset_dir: Path = _setting(
        "DATASET_DIR", _path, Path("data"),
        "A train split and a validation (or test) split as parquet, CSV or JSON lines files named after the split, "
        "with prompt and completion columns or a messages column (chat); initializer.dataset.storage_uri stages it "
        "here.")
    output_dir: Path = _workload_output_dir("sft")
    export_dir: Path | None = _workload_export_dir("sft")
    prompt_column: str = _setting("PROMPT_COLUMN", _name, "prompt", "The column holding each example's prompt.",
                                  shaping=True)
    completion_column: str = _setting("COMPLETION_COLUMN", _name, "completion",
                                      "The column holding each example's completion (what the model learns).",
                                      shaping=True)
    messages_column: str = _setting("MESSAGES_COLUMN", _name, "messages",
                                    "The column holding conversations (lists of {role, content}), rendered with the "
                                    "tokenizer's chat template; the assistant turns are learnt. Taken when present.",
                                    shaping=True)
    lora_rank: int = _setting("LORA_RANK", _non_negative_int, 16, "LoRA's rank; 0: a full fine-tune (every weight).",
                              shaping=True)
    lora_alpha: int = _setting("LORA_ALPHA", _positive_int, 32, "LoRA's alpha: the adapters are scaled by alpha / rank.",
                               shaping=True)
    lora_dropout: float = _setting("LORA_DROPOUT", _non_negative_float, 0.0, "Dropout on the adapters' input.",
                                   shaping=True)
    lora_target_modules: str = _setting("LORA_TARGET_MODULES", _name, "all-linear",
                                        "Comma-separated module names to adapt (q_proj,v_proj), or all-linear.",
                                        shaping=True)
    epochs: int = _setting("EPOCHS", _positive_int, 1, "Passes over the training examples.", shaping=True)
    batch_size: int = _setting("BATCH_SIZE", _positive_int, 8, "Examples per process and step.", shaping=True)
    learning_rate: float = _setting("LEARNING_RATE", _positive_float, 2e-4,
                                    "Peak learning rate of AdamW, after the warm-up, decayed linearly to 0.", "--lr",
                                    shaping=True)
    weight_decay: float = _setting("WEIGHT_DECAY", _non_negative_float, 0.0,
                                   "AdamW's weight decay (not applied to biases and norms).", shaping=True)
    warmup_steps: int = _setting("WARMUP_STEPS", _non_negative_int, 0,
                                 "Optimizer steps over which the learning rate rises linearly from 0.", shaping=True)
    max_grad_norm: float = _setting("MAX_GRAD_NORM", _non_negative_float, 1.0,
                                    "Clip the gradients' global norm to this; 0: no clipping.")
    seed: int = _setting("SEED", _non_negative_int, 0, "Seed of the shuffle, the dropout and the adapters.",
                         shaping=True)
    strategy: str = _setting(
        "STRATEGY", _choice("ddp", "fsdp"), "ddp",
        "ddp (DistributedDataParallel over the weights that train) or fsdp (FSDP2: the model, its gradients and "
        "optimizer state sharded per decoder block; for a model one GPU cannot hold).")
    precision: str = _setting(
        "PRECISION", _choice(*PRECISIONS), "fp32",
        "fp32, bf16 (autocast; under fsdp its mixed-precision policy, on CPUs and GPUs) or fp16 (CUDA only).")
    activation_checkpointing: bool = _setting(
        "ACTIVATION_CHECKPOINTING", _boolean, False,
        "Recompute each decoder block's activations in backward instead of keeping them: less memory for "
        "longer sequences, about a third more compute.")
    max_seq_length: int = _setting("MAX_SEQ_LENGTH", _positive_int, 512,
                                   "Tokens per example (longer ones are cut), or per block with PACKING.", shaping=True)
    packing: bool = _setting("PACKING", _boolean, False,
                             "Concatenate the examples and train on full blocks of MAX_SEQ_LENGTH tokens.",
                             shaping=True)
    export_merged: bool = _setting("EXPORT_MERGED", _boolean, False,
                                   "Export the merged model (base + adapters) beside the adapter.")
    sample_prompts: str = _setting("SAMPLE_PROMPTS", str, "",
                                   "Prompts (separated by ||) whose greedy completions rank 0 logs after each "
                                   "evaluation; empty: none.")
    train_samples: int = _setting("TRAIN_SAMPLES", _non_negative_int, 0, "Train on the first N examples; 0: all.",
                                  shaping=True)
    eval_samples: int = _setting("EVAL_SAMPLES", _non_negative_int, 0, "Evaluate on the first N examples; 0: all.")
    log_interval: int = _log_interval()
    checkpoint_every_steps: int = _checkpoint_every_steps(200)
    checkpoint_every_seconds: float = _workload_checkpoint_every_seconds()
    keep_checkpoints: int = _keep_checkpoints()
    resume: bool = _resume()
    tensorboard: bool = _tensorboard()
    usage_log_seconds: float = _usage_log_seconds()
    collective_timeout: float = _collective_timeout()
    checkpoint_naming: ClassVar[Naming] = OPTIMIZER_STEP

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"


# The programs this project ships (`-m MODULE`), each with its variables: the generator checks a built-in
# program's config_map against its own dataclass, shows its defaults and runs its --check-config before the gang.
BUILT_IN_PROGRAMS: dict[str, type] = {"worker": TrainConfig, "worker.qa": QaConfig, "worker.finetune": FinetuneConfig,
                                     "worker.sft": SftConfig}


@dataclass(frozen=True)
class OwnProgramCheckpoints:
    """What the launcher and the stager read of a user's program with checkpoint.storage_uri: where it keeps its
    checkpoints (the convention of trainer_contract/checkpoint_layout.py's OWN_PROGRAM), as a built-in program's
    config says where it keeps its own. The generator renders the variable; no values file may set it."""

    checkpoint_dir: Path = _setting(
        CHECKPOINT_DIR_VARIABLE, _path, Path("checkpoints"),
        "Where the program writes its checkpoints, each one file or directory renamed into place when whole.")
    checkpoint_naming: ClassVar[Naming] = OWN_PROGRAM
    # the stage step restores the bucket's newest into an empty directory: the program resumes from what it finds
    resume: ClassVar[bool] = True

    @property
    def output_dir(self) -> Path:
        """Beside the checkpoints: where the stage step marks its decision, which the indexes that wait read."""
        return self.checkpoint_dir.parent


def config_fields(config_class: type = TrainConfig) -> list[dataclasses.Field]:
    return list(dataclasses.fields(config_class))


def variable_choices(config_class: type = TrainConfig) -> dict[str, tuple[str, ...]]:
    """The variables that take one of a few words (STRATEGY, PRECISION), with their words."""
    return {item.metadata["env"]: item.metadata["parse"].choices for item in config_fields(config_class)
            if isinstance(item.metadata["parse"], _choice)}


def program_variables(module: str | None) -> frozenset[str] | None:
    """The variables built-in program ``module`` reads; None for a program of the user's (free-form)."""
    config_class = BUILT_IN_PROGRAMS.get(module or "")
    return None if config_class is None else frozenset(item.metadata["env"] for item in config_fields(config_class))


def flag_name(item: dataclasses.Field) -> str:
    return item.metadata["flag"] or "--" + item.name.replace("_", "-")


def parse_value(item: dataclasses.Field, raw: str) -> Any:
    """``raw`` as setting ``item``'s value; ValueError saying what the value must be."""
    try:
        return item.metadata["parse"](raw)
    except ValueError as exc:
        if str(exc).startswith(("invalid literal", "could not convert")):  # int() and float()'s own words
            raise ValueError("must be a number" if item.type in ("float", float) else "must be a whole number") from None
        raise


# Every variable the built-in worker reads, and those that take one of a few words (checked at render time,
# so that a typo fails gen-manifests, not a pod).
def shaping_settings(config_class: type) -> tuple[str, ...]:
    """The settings of ``config_class`` whose change refuses a resume (declared with ``shaping=True``), in order."""
    return tuple(item.name for item in config_fields(config_class) if item.metadata.get("shaping"))


WORKER_VARIABLES = frozenset(item.metadata["env"] for item in config_fields())
WORKER_CHOICES = variable_choices()
# The variables a rendered ConfigMap shows with their defaults, so that a user sees (and edits) the run's
# hyper-parameters there; only for the built-in worker (another program's variables are its own).
SHOWN_DEFAULTS = ("EPOCHS", "BATCH_SIZE", "LEARNING_RATE")
# Why fp16 is refused without a GPU, worded once for the render-time check and the worker's own.
FP16_NEEDS_CUDA = "fp16 needs a CUDA GPU (its gradient scaler runs on CUDA only)"

# A GPU job's request, in every process's environment (rendered with the ConfigMap), so that the launcher can tell
# a pod that sees fewer GPUs than it asked for before the rendezvous: resources.gpu.accelerator_count, and
# resources.gpu.cpu_fallback (true: train on the CPU after one warning line; false: exit GPU_MISSING).
GPUS_VARIABLE = "INDEXED_TRAINER_GPUS"
CPU_FALLBACK_VARIABLE = "INDEXED_TRAINER_CPU_FALLBACK"
# Families of runtime settings any PyTorch process reads (NCCL_SOCKET_IFNAME, TORCH_NCCL_..., GLOO_...):
# passed through for the built-in worker too.
RUNTIME_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "CUDA_", "PYTORCH_", "OMP_", "MKL_", "KMP_")

# Variables torchrun or the Job set for every process: a user value would silently be overridden, or
# would silently override torchrun's own flags (torchrun reads PET_<FLAG> as --<flag>).
RESERVED_VARIABLES = frozenset({
    "JOB_COMPLETION_INDEX", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "RANK",
    "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_NAME", "ROLE_WORLD_SIZE", "NODE_RANK", "NNODES", "NPROC_PER_NODE",
})
RESERVED_PREFIXES = ("PET_", "TORCHELASTIC_", "INDEXED_TRAINER_")



def shown_defaults(config_class: type = TrainConfig) -> dict[str, str]:
    """SHOWN_DEFAULTS with the program's own defaults, as ConfigMap strings."""
    defaults = {item.metadata["env"]: item.default for item in config_fields(config_class)}
    return {name: str(defaults[name]) for name in SHOWN_DEFAULTS}


def variable_problem(name: str, text: str, config_class: type = TrainConfig) -> str | None:
    """Why ``text`` is not a value the program accepts for its variable ``name`` (its own check, so that a render
    refuses what the pod would: "must be at least 1"), or None."""
    item = next(item for item in config_fields(config_class) if item.metadata["env"] == name)
    try:
        parse_value(item, text)
    except ValueError as exc:
        return str(exc)
    return None


def gpu_request(gpus: int, cpu_fallback: bool) -> dict[str, str]:
    """The variables that carry a GPU job's request to the launcher (none for a CPU job)."""
    return {GPUS_VARIABLE: str(gpus), CPU_FALLBACK_VARIABLE: str(cpu_fallback).lower()} if gpus else {}


def reserved(name: str) -> bool:
    return name in RESERVED_VARIABLES or name.startswith(RESERVED_PREFIXES)
