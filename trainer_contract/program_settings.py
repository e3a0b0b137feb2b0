"""The built-in programs' settings, each declared once (trainer_contract/settings.py says how): what every program
reads alike (RunSettings), what the programs on a pretrained model add (PretrainedModelSettings), AdamW's schedule
(AdamWSettings) and the parallelism word (ShardedSettings); each program's config composes them and redeclares
only the defaults, help or choices it changes (`changed`), as TRL's configs do. Whether a setting refuses a resume
is part of its declaration (`shaping=True`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from trainer_contract.checkpoint_layout import CHECKPOINT_DIR_VARIABLE, EPOCH_STEP, OPTIMIZER_STEP, OWN_PROGRAM, Naming
from trainer_contract.data_mixture import TRAIN_WEIGHTS_VARIABLE
from trainer_contract.settings import (
    changed,
    choice,
    config_fields,
    parse_boolean,
    parse_file_patterns,
    parse_fraction,
    parse_name,
    parse_non_negative_float,
    parse_non_negative_int,
    parse_optional_path,
    parse_optional_url,
    parse_path,
    parse_positive_float,
    parse_positive_int,
    parse_seconds_or_auto,
    parse_weights,
    setting,
)

# The directories every built-in program takes, by the names a render places them under (generator/spec.py's
# placement, the launcher's gang ledger, the check that a kept directory is on a volume the pods write to).
OUTPUT_VARIABLE = "OUTPUT_DIR"
DATA_VARIABLE = "DATA_DIR"
# STRATEGY's words (trainer_runtime/strategies/ maps each to its class) and PRECISION's.
STRATEGIES = ("allreduce", "ddp", "fsdp", "hsdp")
PRECISIONS = ("fp32", "bf16", "fp16")
# LR_SCHEDULER_TYPE's words, transformers' get_scheduler names (trainer_runtime/pretrained/schedules.py)
SCHEDULES = ("linear", "cosine", "constant", "constant_with_warmup")
# ATTN_IMPLEMENTATION's words: from_pretrained's attn_implementation, "auto" leaving it to transformers
ATTENTION_KERNELS = ("auto", "eager", "sdpa", "flash_attention_2")
# Why fp16 is refused without a GPU, worded once for the render-time check and the programs' own.
FP16_NEEDS_CUDA = "fp16 needs a CUDA GPU (its gradient scaler runs on CUDA only)"


@dataclass(frozen=True)
class RunSettings:
    """What every built-in program reads alike: the run's shape, where it writes, how it logs, checkpoints and
    resumes."""

    epochs: int = setting("EPOCHS", parse_positive_int, 1, "Passes over the training examples.", shaping=True)
    batch_size: int = setting("BATCH_SIZE", parse_positive_int, 8, "Examples per process and step.", shaping=True)
    learning_rate: float = setting("LEARNING_RATE", parse_positive_float, 2e-5,
                                   "Peak learning rate of AdamW, reached after the warm-up (LR_SCHEDULER_TYPE says "
                                   "what follows).", "--lr", shaping=True)
    seed: int = setting("SEED", parse_non_negative_int, 0, "Seed of the shuffle and of the weights made new.",
                        shaping=True)
    precision: str = setting(
        "PRECISION", choice(*PRECISIONS), "fp32",
        "fp32, bf16 (autocast; under fsdp its mixed-precision policy) or fp16 (CUDA only).", noted=True)
    train_samples: int = setting("TRAIN_SAMPLES", parse_non_negative_int, 0,
                                 "Train on the first N examples; 0: all.", shaping=True)
    output_dir: Path = setting(OUTPUT_VARIABLE, parse_path, Path("runs/local"),
                               "Checkpoints, metrics.jsonl and the run's outputs.")
    export_dir: Path | None = setting("EXPORT_DIR", parse_optional_path, None,
                                      "Where rank 0 exports the trained model; export.storage_uri sets it and uploads "
                                      "it.")
    log_interval: int = setting("LOG_INTERVAL", parse_positive_int, 50, "Log every N steps (and an epoch's last).")
    checkpoint_every_seconds: float | str = setting(
        "CHECKPOINT_EVERY_SECONDS", parse_seconds_or_auto, 300.0,
        "Checkpoint, mid-epoch too, once this many seconds of training have passed since the last checkpoint, so "
        "that a fault costs at most about that much training whatever an epoch lasts (rank 0's clock, agreed by "
        "every rank in the step's own collective); 0: off; auto: √(2 × what a save costs the training × the time "
        "between faults) (Young/Daly: from the last save's measured cost, the nodes and the faults this Job has "
        "seen; said in the log). 300 s: a checkpoint can be large (LoRA's adapters are MiB, a whole model's weights "
        "with their optimizer state three times the weights); every five minutes, a save that stops the training "
        "for 6 s costs 2% of it.")
    keep_checkpoints: int = setting("KEEP_CHECKPOINTS", parse_positive_int, 2, "Checkpoints kept on the volume.")
    resume: bool = setting("RESUME", parse_boolean, True,
                           "Resume from the newest valid checkpoint in OUTPUT_DIR/checkpoints (refused if a shaping "
                           "setting changed); false: the run in OUTPUT_DIR is moved, whole, to "
                           "OUTPUT_DIR/previous-runs/ and this one starts from the beginning.")
    tensorboard: bool = setting(
        "TENSORBOARD", parse_boolean, True,
        "Rank 0 writes TensorBoard event files to OUTPUT_DIR/tensorboard (`tensorboard --logdir OUTPUT_DIR`).")
    collective_timeout: float = setting(
        "COLLECTIVE_TIMEOUT", parse_positive_float, 300.0,
        "Seconds a collective may wait for a peer before the process gives up (exit 75).")
    usage_log_seconds: float = setting(
        "USAGE_LOG_SECONDS", parse_positive_float, 5.0,
        "Every process appends a line of GPU (or CPU and memory) use to OUTPUT_DIR/logs/usage-rank<R>.log this often.")

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"


@dataclass(frozen=True)
class ShardedSettings:
    """The parallelism word of a program that offers more than one."""

    strategy: str = setting(
        "STRATEGY", choice(*STRATEGIES), "ddp",
        "How gradients are combined: ddp (DistributedDataParallel), fsdp (FSDP2: parameters, gradients and "
        "optimizer state sharded) or hsdp (fsdp within a node, replicated across nodes).", noted=True)


@dataclass(frozen=True)
class AsyncCheckpointSettings:
    """Of a program whose checkpoints can be written beside its training (trainer_runtime/checkpoints/beside.py)."""

    checkpoint_async: bool = setting(
        "CHECKPOINT_ASYNC", parse_boolean, True,
        "Write checkpoints beside the training: it waits only while its state is copied (a second copy of this "
        "rank's state is held for the run), the write, hashing and publication go on beside the next steps; a "
        "stop's checkpoint is always written before the process exits. false: the training waits for each write.")
    # its ranks move a sharded checkpoint to and from checkpoint.storage_uri themselves, each its own share
    # (trainer_runtime/checkpoints/bucket_shares.py); the stage step leaves such a restore to them
    restored_by_its_ranks: ClassVar[bool] = True


@dataclass(frozen=True)
class PretrainedModelSettings(RunSettings):
    """What the programs that fine-tune a pretrained model read alike: the model and data the stager put in place,
    the tokenized length, the evaluation's size and checkpoints by steps."""

    model_dir: Path = setting("MODEL_DIR", parse_path, Path("model"),
                              "The pretrained model and its tokenizer, as `save_pretrained` writes them; "
                              "initializer.model.storage_uri stages it here.")
    dataset_dir: Path = setting("DATASET_DIR", parse_path, Path("data"),
                                "The training and evaluation data; initializer.dataset.storage_uri stages it here.")
    max_seq_length: int = setting("MAX_SEQ_LENGTH", parse_positive_int, 512, "Tokens per example (longer ones are cut).",
                                  shaping=True)
    eval_samples: int = setting("EVAL_SAMPLES", parse_non_negative_int, 0, "Evaluate on the first N examples; 0: all.")
    checkpoint_every_steps: int = setting(
        "CHECKPOINT_EVERY_STEPS", parse_non_negative_int, 0,
        "Checkpoint every N optimizer steps as well as at each epoch's end; 0: none by steps.")
    attn_implementation: str = setting(
        "ATTN_IMPLEMENTATION", choice(*ATTENTION_KERNELS), "auto",
        "The attention kernels, as from_pretrained's attn_implementation: auto (transformers' choice, sdpa where the "
        "model has it), eager, sdpa, or flash_attention_2 (CUDA GPUs, with the flash-attn package in the image).")
    resume: bool = changed(RunSettings, "resume", help="Resume from the newest checkpoint in OUTPUT_DIR/checkpoints "
                           "(refused if the model, the tokenizer or a shaping setting changed).")
    checkpoint_naming: ClassVar[Naming] = OPTIMIZER_STEP


def _output_dir(task: str):
    return changed(PretrainedModelSettings, "output_dir", help="Checkpoints, metrics.jsonl, TensorBoard's events, the "
                   f"usage log and <model type>_{task}_trained/.")


def _export_dir(task: str):
    return changed(PretrainedModelSettings, "export_dir", help="Where rank 0 writes the trained model and tokenizer "
                   "(`save_pretrained`); export.storage_uri sets it and uploads it; empty: "
                   f"OUTPUT_DIR/<model type>_{task}_trained.")


def _model_dir(detail: str, model: str = "model"):
    return changed(PretrainedModelSettings, "model_dir", help=f"The pretrained {model} and its tokenizer, as "
                   f"`save_pretrained` writes them ({detail}); initializer.model.storage_uri stages it here.")


def _dataset_dir(what: str):
    return changed(PretrainedModelSettings, "dataset_dir", help=f"{what}; initializer.dataset.storage_uri stages it "
                   "here.")


def _strategy(default: str, help: str, *others: str):
    """STRATEGY as a program with a choice of ddp and fsdp (and ``others``) declares it: its default first."""
    return changed(ShardedSettings, "strategy", default, help,
                   choice(default, *sorted({"ddp", "fsdp"} - {default}), *others))


@dataclass(frozen=True)
class AdamWSettings(AsyncCheckpointSettings, PretrainedModelSettings):
    """AdamW's decay, warm-up and clipping, for the programs whose loop is this project's own."""

    weight_decay: float = setting("WEIGHT_DECAY", parse_non_negative_float, 0.0,
                                  "AdamW's weight decay (not applied to biases and norms).", shaping=True)
    warmup_steps: int = setting("WARMUP_STEPS", parse_non_negative_int, 0,
                                "Optimizer steps over which the learning rate rises linearly from 0.", shaping=True)
    lr_scheduler_type: str = setting(
        "LR_SCHEDULER_TYPE", choice(*SCHEDULES), "linear",
        "The learning rate after the warm-up, as transformers' get_scheduler (and TRL) name it: linear (decay to 0 "
        "at the last step), cosine (half a cosine to 0), constant (the peak throughout, no warm-up) or "
        "constant_with_warmup.", shaping=True)
    max_grad_norm: float = setting("MAX_GRAD_NORM", parse_non_negative_float, 1.0,
                                   "Clip the gradients' global norm to this; 0: no clipping.")
    max_steps: int = setting("MAX_STEPS", parse_non_negative_int, 0,
                             "Stop after this many optimizer steps, within an epoch too (evaluated, checkpointed and "
                             "exported there), the schedule ending at it; 0: EPOCHS decide. As TRL's max_steps, it "
                             "overrides EPOCHS when set.", shaping=True)
    gradient_accumulation_steps: int = setting(
        "GRADIENT_ACCUMULATION_STEPS", parse_positive_int, 1,
        "Batches of BATCH_SIZE each process sums gradients over before each optimizer step, as TRL's "
        "gradient_accumulation_steps: a step learns from BATCH_SIZE x this x the processes' examples at the memory of "
        "one batch, each batch's loss weighted by its share of the step's examples (sft: of its supervised tokens, "
        "as transformers counts them); steps, MAX_STEPS and the checkpoint cadence count optimizer steps.",
        shaping=True)
    global_batch_size: int = setting(
        "GLOBAL_BATCH_SIZE", parse_non_negative_int, 0,
        "Examples a step learns from across every process, kept whatever their number: each process accumulates "
        "GLOBAL_BATCH_SIZE / (BATCH_SIZE x processes) batches (a whole number, else refused), so a run resumes on "
        "another number of nodes with every step's examples as before (the start says so); set it or "
        "GRADIENT_ACCUMULATION_STEPS, not both. 0: BATCH_SIZE x GRADIENT_ACCUMULATION_STEPS x processes, and a "
        "resume needs the same processes.", shaping=True)


@dataclass(frozen=True)
class TrainConfig(AsyncCheckpointSettings, ShardedSettings, RunSettings):
    """Everything the MNIST worker reads from its environment. docs/worker.md's table is generated from this."""

    epochs: int = changed(RunSettings, "epochs", 5, "Passes over the training set.")
    batch_size: int = changed(RunSettings, "batch_size", 64, "Mini-batch size per process.")
    learning_rate: float = changed(RunSettings, "learning_rate", 0.004,
                                   "Peak learning rate of Adam under a one-cycle schedule.")
    seed: int = changed(RunSettings, "seed", help="Seed of the model's initialisation and of each epoch's shuffle.")
    strategy: str = changed(
        ShardedSettings, "strategy", "allreduce",
        "How gradients are combined: allreduce (one flat all-reduce per step), ddp (DistributedDataParallel, "
        "bucketed and overlapped with backward), fsdp (FSDP2, parameters, gradients and optimizer state "
        "sharded per layer; sharded checkpoints) or hsdp (fsdp sharded within a node and replicated across nodes: "
        "only the gradients' all-reduce crosses the network).")
    precision: str = changed(
        RunSettings, "precision", help="fp32, bf16 (autocast; under fsdp its mixed-precision policy) or fp16 (with a "
        "gradient scaler; CUDA only). Weights, optimizer state and the gradient reduction stay fp32.")
    train_samples: int = changed(RunSettings, "train_samples", help="Train on the first N images only; 0: all.")
    output_dir: Path = changed(RunSettings, "output_dir", help="Checkpoints, metrics.jsonl, model.pt and model.json.")
    export_dir: Path | None = changed(
        RunSettings, "export_dir", help="Rank 0 exports the trained model here when training ends (model.pt, "
        "model.json, metrics.jsonl and a README.md model card); export.storage_uri sets it and uploads it; empty: "
        "no export.")
    checkpoint_every_seconds: float | str = changed(
        RunSettings, "checkpoint_every_seconds", 30.0,
        "Checkpoint, mid-epoch too, once this many seconds of training have passed since the last checkpoint, so "
        "that a fault costs at most about that much training whatever an epoch lasts (rank 0's clock, agreed by "
        "every rank in the step's own collective); 0: off. 30 s: an asynchronous checkpoint of this model stalls "
        "the training for milliseconds, and a recovery itself takes seconds: what a fault costs stays of the "
        "recovery's order.")
    keep_checkpoints: int = changed(
        RunSettings, "keep_checkpoints", 3, "Checkpoints kept on the volume, and the newest at an epoch's start "
        "beside them (another world size resumes only from one).")
    data_dir: Path = setting(DATA_VARIABLE, parse_path, Path("data"),
                             "Where MNIST is (or is downloaded to): DATA_DIR/MNIST/raw/.")
    data_shared: bool = setting(
        "DATA_SHARED", parse_boolean, True,
        "DATA_DIR is on a volume all pods share: only global rank 0 downloads. false: local rank 0 of each pod does.")
    download: bool = setting("DOWNLOAD", parse_boolean, True, "Download MNIST when it is missing (false: fail instead).")
    mnist_mirror: str | None = setting(
        "MNIST_MIRROR", parse_optional_url, None, "Base URL serving the four MNIST .gz files (air-gapped clusters); "
        "empty: torchvision's mirrors.")
    mnist_checksums: Path | None = setting(
        "MNIST_CHECKSUMS", parse_optional_path, None, "A sha256sum-format file of the mirror's .gz files, for a "
        "mirror serving other files than the official ones; empty: the official MD5s.")
    mnist_sample_fallback: bool = setting(
        "MNIST_SAMPLE_FALLBACK", parse_boolean, False,
        "When MNIST cannot be had, train on the sample shipped with the worker (the 10,000 MNIST test digits: "
        "8,000 to train, 2,000 to test) instead of failing; for a run on one machine (./run.sh --local sets it).")
    checkpoint_every: int = setting("CHECKPOINT_EVERY", parse_non_negative_int, 1,
                                    "Checkpoint every N epochs and after the last; 0: after the last only.")
    download_timeout: float = setting(
        "DOWNLOAD_TIMEOUT", parse_positive_float, 600.0,
        "Seconds the other ranks wait for the downloading rank before giving up (exit 75).")
    # how its checkpoints are named (trainer_contract/checkpoint_layout.py): the volume's and the bucket's
    checkpoint_naming: ClassVar[Naming] = EPOCH_STEP


@dataclass(frozen=True)
class QaConfig(ShardedSettings, PretrainedModelSettings):
    """The question-answering workload's variables (`python -m worker.qa`, BERT on SQuAD with Lightning).
    docs/reference.md's table comes from here."""

    epochs: int = changed(RunSettings, "epochs", 2, "Passes over the training questions.")
    batch_size: int = changed(RunSettings, "batch_size", 16, "Features (question and context window) per process "
                              "and step.")
    learning_rate: float = changed(RunSettings, "learning_rate", 3e-5, "Peak learning rate of AdamW, decayed "
                                   "linearly to 0.")
    seed: int = changed(RunSettings, "seed", help="Seed of the shuffle and of the new answer layer.")
    strategy: str = _strategy("fsdp", "fsdp (FSDP2 through Lightning: parameters, gradients and optimizer state "
                              "sharded per transformer layer) or ddp (DistributedDataParallel).")
    train_samples: int = changed(RunSettings, "train_samples", help="Train on the first N questions; 0: all.")
    eval_samples: int = changed(PretrainedModelSettings, "eval_samples",
                                help="Evaluate on the first N questions; 0: all.")
    output_dir: Path = _output_dir("squad")
    export_dir: Path | None = _export_dir("squad")
    model_dir: Path = _model_dir("any AutoModelForQuestionAnswering")
    dataset_dir: Path = _dataset_dir(
        "SQuAD-format data: train-v1.1.json and dev-v1.1.json (or train.json and validation.json), or the Hub "
        "dataset's parquet files (plain_text/train-*.parquet, plain_text/validation-*.parquet)")
    max_seq_length: int = changed(PretrainedModelSettings, "max_seq_length", 384,
                                  "Tokens per feature: question and a window of its context.")
    doc_stride: int = setting("DOC_STRIDE", parse_positive_int, 128, "Tokens the windows of a long context share.",
                              shaping=True)
    max_answer_length: int = setting("MAX_ANSWER_LENGTH", parse_positive_int, 30,
                                     "Longest answer, in tokens, the evaluation may predict.")


@dataclass(frozen=True)
class EvaluationSettings:
    """When the programs whose loop is this project's own evaluate, and which checkpoint they keep and export for
    its scores (trainer_runtime/pretrained/best_checkpoint.py)."""

    eval_steps: int = setting(
        "EVAL_STEPS", parse_non_negative_int, 0,
        "Evaluate every N optimizer steps as well as at each epoch's end, as TRL's eval_strategy=steps with "
        "eval_steps: each evaluation writes its record at its step (metrics.jsonl, TensorBoard) and a checkpoint "
        "follows it; 0: at epochs' ends only.")
    metric_for_best_model: str = setting(
        "METRIC_FOR_BEST_MODEL", choice("none", "loss"), "none",
        "TRL's metric_for_best_model with load_best_model_at_end: the checkpoint with the best evaluation of this "
        "metric (loss) is kept beside the newest KEEP_CHECKPOINTS and is what the run exports at its end; none: the "
        "last model.")


def _best_by(metrics: str, *choices: str):
    """METRIC_FOR_BEST_MODEL as a program declares it: the words of its evaluation's scores."""
    return changed(EvaluationSettings, "metric_for_best_model", help="TRL's metric_for_best_model with "
                   f"load_best_model_at_end: {metrics} (lower loss and perplexity, higher accuracy and f1 are "
                   "better); the checkpoint with the best evaluation of it is kept beside the newest KEEP_CHECKPOINTS "
                   "and is what the run exports at its end; none: the last model.", parse=choice(*choices))


@dataclass(frozen=True)
class TableDataSettings:
    """Which of DATASET_DIR's files train and which evaluate, for the programs that read tables
    (trainer_runtime/pretrained/tables.py): by their split's name unless globs name them; an evaluation split
    held out of the train rows where no file holds one; rank 0 tokenizes them once (the token cache)."""

    train_files: tuple[str, ...] = setting(
        "TRAIN_FILES", parse_file_patterns, (),
        "Comma-separated globs, relative to DATASET_DIR, of the training files (`chat/*.jsonl,extra.parquet`; `**` "
        "for any folders), as datasets' data_files; empty: the files named after the train split.", shaping=True)
    train_weights: tuple[float, ...] = setting(
        TRAIN_WEIGHTS_VARIABLE, parse_weights, (),
        "Comma-separated weights, one per TRAIN_FILES glob, each glob's files one dataset (`3,1`): an epoch takes as "
        "many rows as they hold together, each dataset's share in proportion to its weight (less than its rows: rows "
        "SEED chooses; more: its rows repeated, then rows SEED chooses), as datasets' interleave_datasets("
        "probabilities) with the shares fixed, the same on every rank and restart; EVAL_FRACTION holds out of each "
        "dataset before the mix. Empty: every row once.", shaping=True)
    eval_files: tuple[str, ...] = setting(
        "EVAL_FILES", parse_file_patterns, (),
        "The same for the evaluation files (none may be a training file); empty: the validation split's files, else "
        "the test split's, else EVAL_FRACTION.")
    eval_fraction: float = setting(
        "EVAL_FRACTION", parse_fraction, 0.05,
        "Where DATASET_DIR has no evaluation split and EVAL_FILES is empty, hold out this fraction of the train rows "
        "(rounded up; SEED chooses them, the same on every rank and restart) to evaluate on, as datasets' "
        "train_test_split(test_size); 0: refuse to start without an evaluation split.", shaping=True)
    tokenize_timeout: float = setting(
        "TOKENIZE_TIMEOUT", parse_positive_float, 3600.0,
        "Seconds the other processes wait while rank 0 tokenizes the data into OUTPUT_DIR/token-cache/ (once: a "
        "restart, a resume on another node count and a new run with the same tokenizer, data and shaping settings "
        "read it there).")


@dataclass(frozen=True)
class FinetuneConfig(EvaluationSettings, TableDataSettings, AdamWSettings):
    """The text-classification workload (`python -m worker.finetune`): a pretrained Hub model fine-tuned for text
    classification with plain PyTorch, DistributedDataParallel and automatic mixed precision. A seed's config.yaml
    of hyper-parameters sets these by their lower-case names (values' hyperparameters_file)."""

    epochs: int = changed(RunSettings, "epochs", 3, "Passes over the training texts.")
    batch_size: int = changed(RunSettings, "batch_size", 16, "Texts per process and step.")
    seed: int = changed(RunSettings, "seed", help="Seed of the shuffle, the dropout and the new head.")
    precision: str = changed(RunSettings, "precision", help="fp32, bf16 (autocast, on CPUs and GPUs) or fp16 "
                             "(autocast and a gradient scaler, CUDA only).")
    train_samples: int = changed(RunSettings, "train_samples", help="Train on the first N texts; 0: all.")
    eval_samples: int = changed(PretrainedModelSettings, "eval_samples", help="Evaluate on the first N texts; 0: all.")
    output_dir: Path = _output_dir("classifier")
    export_dir: Path | None = _export_dir("classifier")
    model_dir: Path = _model_dir("any AutoModelForSequenceClassification; a new classification head is made for the "
                                 "dataset's labels")
    dataset_dir: Path = _dataset_dir(
        "Labelled texts: a train split and a validation (or test) split, each as parquet (the Hub's "
        "plain_text/train-*.parquet), CSV or JSON lines files named after the split (or TRAIN_FILES and EVAL_FILES)")
    max_seq_length: int = changed(PretrainedModelSettings, "max_seq_length", 128,
                                  "Tokens per text (longer ones are cut).")
    checkpoint_every_steps: int = changed(PretrainedModelSettings, "checkpoint_every_steps", 500)
    weight_decay: float = changed(AdamWSettings, "weight_decay", 0.01)
    text_column: str = setting("TEXT_COLUMN", parse_name, "text", "The column holding each example's text.",
                               shaping=True)
    text_pair_column: str = setting("TEXT_PAIR_COLUMN", str, "",
                                    "A second text per example (sentence pairs); empty: none.", shaping=True)
    metric_for_best_model: str = _best_by("loss, accuracy or f1", "none", "loss", "accuracy", "f1")
    label_column: str = setting("LABEL_COLUMN", parse_name, "label",
                                "The column holding each example's label: class numbers from 0, or names.",
                                shaping=True)


@dataclass(frozen=True)
class SftConfig(ShardedSettings, EvaluationSettings, TableDataSettings, AdamWSettings):
    """Supervised fine-tuning of a causal language model (`python -m worker.sft`): any AutoModelForCausalLM with
    LoRA adapters (peft) or whole, on prompt/completion or chat data, DDP or FSDP2 with automatic mixed precision."""

    learning_rate: float = changed(RunSettings, "learning_rate", 2e-4)
    seed: int = changed(RunSettings, "seed", help="Seed of the shuffle, the dropout and the adapters.")
    strategy: str = _strategy("ddp", "ddp (DistributedDataParallel over the weights that train), fsdp (FSDP2: the "
                              "model, its gradients and optimizer state sharded per decoder block; for a model one "
                              "GPU cannot hold) or hsdp (fsdp sharded within a node and replicated across nodes: "
                              "the blocks' all-gathers stay on the node's links, only the gradients' all-reduce "
                              "crosses the network; for a model one node holds).", "hsdp")
    precision: str = changed(RunSettings, "precision", help="fp32, bf16 (autocast; under fsdp its mixed-precision "
                             "policy, on CPUs and GPUs) or fp16 (CUDA only).")
    output_dir: Path = _output_dir("sft")
    export_dir: Path | None = _export_dir("sft")
    model_dir: Path = _model_dir("safetensors", model="causal LM")
    dataset_dir: Path = _dataset_dir(
        "A train split and a validation (or test) split as parquet, CSV or JSON lines files named after the split "
        "(or TRAIN_FILES and EVAL_FILES), with prompt and completion columns or a messages column (chat)")
    max_seq_length: int = changed(PretrainedModelSettings, "max_seq_length",
                                  help="Tokens per example (longer ones are cut), or per block with PACKING.")
    checkpoint_every_steps: int = changed(PretrainedModelSettings, "checkpoint_every_steps", 200)
    metric_for_best_model: str = _best_by("loss or perplexity", "none", "loss", "perplexity")
    prompt_column: str = setting("PROMPT_COLUMN", parse_name, "prompt", "The column holding each example's prompt.",
                                 shaping=True)
    completion_column: str = setting("COMPLETION_COLUMN", parse_name, "completion",
                                     "The column holding each example's completion (what the model learns).",
                                     shaping=True)
    messages_column: str = setting("MESSAGES_COLUMN", parse_name, "messages",
                                   "The column holding conversations (lists of {role, content}), rendered with the "
                                   "tokenizer's chat template; the assistant turns are learnt. Taken when present.",
                                   shaping=True)
    lora_rank: int = setting("LORA_RANK", parse_non_negative_int, 16,
                             "LoRA's rank; 0: a full fine-tune (every weight).", shaping=True)
    lora_alpha: int = setting("LORA_ALPHA", parse_positive_int, 32,
                              "LoRA's alpha: the adapters are scaled by alpha / rank.", shaping=True)
    lora_dropout: float = setting("LORA_DROPOUT", parse_non_negative_float, 0.0, "Dropout on the adapters' input.",
                                  shaping=True)
    lora_target_modules: str = setting("LORA_TARGET_MODULES", parse_name, "all-linear",
                                       "Comma-separated module names to adapt (q_proj,v_proj), or all-linear.",
                                       shaping=True)
    activation_checkpointing: bool = setting(
        "ACTIVATION_CHECKPOINTING", parse_boolean, False,
        "Recompute each decoder block's activations in backward instead of keeping them: less memory for "
        "longer sequences, about a third more compute.")
    packing: bool = setting("PACKING", parse_boolean, False,
                            "Concatenate the examples and train on full blocks of MAX_SEQ_LENGTH tokens.", shaping=True)
    export_merged: bool = setting("EXPORT_MERGED", parse_boolean, False,
                                  "Export the merged model (base + adapters) beside the adapter.")
    chat_template_path: Path | None = setting(
        "CHAT_TEMPLATE_PATH", parse_optional_path, None,
        "TRL's chat_template_path: the chat template the messages column is rendered with (and the export keeps), "
        "instead of the tokenizer's own: a Jinja file, or a directory holding a tokenizer with one; empty: the "
        "tokenizer's.", shaping=True)
    sample_prompts: str = setting("SAMPLE_PROMPTS", str, "",
                                  "Prompts (separated by ||) whose greedy completions rank 0 logs after each "
                                  "evaluation; empty: none.")


@dataclass(frozen=True)
class BuiltInProgram:
    """A program this project ships, ``python -m <module>``: its settings, ``--help``'s description, the module
    whose ``run(config, env)`` trains (imported only then: --check-config and --help stay torch-free), what that
    imports (module -> the extra that brings it), the settings --check-config's line shows, and the class that
    reads its finished run on the volume ("module:Class", a trainer_runtime.finished_run.FinishedRun: the launcher's
    and the program's shell's). ``starts_with``: the libraries its training imports as it starts, beyond its training
    module (torch._dynamo: torch.optim's first step), which its entry and its warm workers import with the training
    module, the collector paused (trainer_contract/start_up.py)."""

    module: str
    config: type
    what: str
    training: str
    needs: dict[str, str]
    shown: tuple[str, ...] = ("model_dir", "dataset_dir", "strategy", "precision", "epochs", "output_dir")
    finished_run: str = "trainer_runtime.pretrained.finished_run:PretrainedRun"  # every program but MNIST's
    starts_with: tuple[str, ...] = ("torch._dynamo", "transformers.modeling_utils")

    @property
    def start_imports(self) -> tuple[str, ...]:
        """What a process of this program imports before it trains: its training module, then ``starts_with``."""
        return (self.training, *self.starts_with)


PROGRAMS: tuple[BuiltInProgram, ...] = (
    BuiltInProgram("worker", TrainConfig, "Train the MNIST CNN", "worker.mnist.program", {"torch": "worker"},
                   ("epochs", "batch_size", "learning_rate", "data_dir", "output_dir"),
                   "worker.mnist.finished_run:MnistRun", ("torch._dynamo",)),
    BuiltInProgram("worker.qa", QaConfig, "Fine-tune a model for SQuAD question answering", "worker.qa.train",
                   {"torch": "worker", "transformers": "hf", "lightning": "lightning"}),
    BuiltInProgram("worker.finetune", FinetuneConfig, "Fine-tune a model for text classification (DDP + AMP)",
                   "worker.finetune.train", {"torch": "worker", "transformers": "hf", "pyarrow": "hf"}),
    BuiltInProgram("worker.sft", SftConfig, "Supervised fine-tuning of a causal LM (LoRA or full; DDP + AMP)",
                   "worker.sft.train", {"torch": "worker", "transformers": "hf", "pyarrow": "hf", "peft": "hf"},
                   starts_with=("torch._dynamo", "transformers.modeling_utils", "peft")),
)
# Each with its variables: the generator checks a built-in program's config_map against its own dataclass, shows
# its defaults and runs its --check-config before the gang.
BUILT_IN_PROGRAMS: dict[str, type] = {program.module: program.config for program in PROGRAMS}


@dataclass(frozen=True)
class OwnProgramCheckpoints:
    """What the launcher and the stager read of a user's program with checkpoint.storage_uri: where it keeps its
    checkpoints (the convention of trainer_contract/checkpoint_layout.py's OWN_PROGRAM), as a built-in program's
    config says where it keeps its own. The generator renders the variable; no values file may set it."""

    checkpoint_dir: Path = setting(
        CHECKPOINT_DIR_VARIABLE, parse_path, Path("checkpoints"),
        "Where the program writes its checkpoints, each one file or directory renamed into place when whole.")
    checkpoint_naming: ClassVar[Naming] = OWN_PROGRAM
    # the stage step restores the bucket's newest into an empty directory: the program resumes from what it finds
    resume: ClassVar[bool] = True

    @property
    def output_dir(self) -> Path:
        """Beside the checkpoints: where the stage step marks its decision, which the indexes that wait read."""
        return self.checkpoint_dir.parent


def program_variables(module: str | None) -> frozenset[str] | None:
    """The variables built-in program ``module`` reads; None for a program of the user's (free-form)."""
    config_class = BUILT_IN_PROGRAMS.get(module or "")
    return None if config_class is None else frozenset(item.metadata["env"] for item in config_fields(config_class))


# The variables a rendered ConfigMap shows with their defaults, so that a user sees (and edits) the run's
# hyper-parameters there; only for the built-in programs (another program's variables are its own).
SHOWN_DEFAULTS = ("EPOCHS", "BATCH_SIZE", "LEARNING_RATE")


def shown_defaults(config_class: type) -> dict[str, str]:
    """SHOWN_DEFAULTS with the program's own defaults, as ConfigMap strings."""
    defaults = {item.metadata["env"]: item.default for item in config_fields(config_class)}
    return {name: str(defaults[name]) for name in SHOWN_DEFAULTS}
