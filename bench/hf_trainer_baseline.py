"""The baseline of python -m bench.transformers: Hugging Face's Trainer fine-tuning the same model on the same
texts with the same recipe as python -m worker.finetune (batch per process, epochs, AdamW's learning rate and
weight decay, linear decay, clipping, bf16 autocast, DDP over gloo, or NCCL with a GPU per process where CUDA is
there, an evaluation per epoch), under torchrun:

    torchrun --standalone --nproc-per-node 2 -m bench.hf_trainer_baseline MODEL_DIR DATASET_DIR RESULT.json

The data are read and tokenized by worker.finetune's own readers (not timed), so both contenders train on the very
same token ids. Rank 0 writes the training time (evaluations left out) and each evaluation's macro F1 with the
seconds since the training began; on CUDA every rank its peak CUDA memory allocated, in cuda-peak-rank<R>.txt beside
RESULT.json."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from trainer_contract.program_settings import FinetuneConfig
from trainer_runtime.usage_log import cuda_peak_mib
from worker.finetune import texts as text_data
from worker.finetune.evaluation import scores


class Examples(torch.utils.data.Dataset):
    def __init__(self, examples: list[dict]):
        self.examples = [{key: value for key, value in item.items() if key != "index"} for item in examples]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict:
        return self.examples[index]


class Timeline(TrainerCallback):
    """The seconds from the training's start to each evaluation's end, with its macro F1."""

    def __init__(self):
        self.began, self.evaluations = 0.0, []

    def on_train_begin(self, args, state, control, **kwargs):
        self.began = time.monotonic()

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.evaluations.append({"seconds": time.monotonic() - self.began, "f1": metrics["eval_f1"],
                                 "runtime": metrics["eval_runtime"]})


def macro_f1(prediction) -> dict[str, float]:
    logits, labels = prediction.predictions, prediction.label_ids
    classes = logits.shape[-1]
    confusion = torch.bincount(torch.as_tensor(labels) * classes + torch.as_tensor(logits).argmax(-1),
                               minlength=classes * classes).view(classes, classes)
    return {"f1": scores(confusion, 0.0)["f1"]}


def main(model_dir: str, dataset_dir: str, result_path: str) -> int:
    config = FinetuneConfig(model_dir=Path(model_dir), dataset_dir=Path(dataset_dir),
                            epochs=int(os.environ["EPOCHS"]), batch_size=int(os.environ["BATCH_SIZE"]),
                            learning_rate=float(os.environ["LEARNING_RATE"]),
                            max_seq_length=int(os.environ["MAX_SEQ_LENGTH"]))
    data = text_data.load(config)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    train = Examples(text_data.tokenized(tokenizer, data.train, config.max_seq_length))
    evaluation = Examples(text_data.tokenized(tokenizer, data.evaluation, config.max_seq_length))
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    cuda = torch.cuda.is_available()  # as worker.finetune chooses (trainer_runtime.gang)
    arguments = TrainingArguments(
        output_dir=str(Path(result_path).parent / "trainer-output"), per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size, num_train_epochs=config.epochs,
        learning_rate=config.learning_rate, weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
        lr_scheduler_type=config.lr_scheduler_type, warmup_steps=config.warmup_steps,
        bf16=os.environ.get("PRECISION") == "bf16", use_cpu=not cuda,
        ddp_backend="nccl" if cuda else "gloo", eval_strategy="epoch", save_strategy="no", logging_strategy="no",
        report_to="none", disable_tqdm=True, seed=config.seed, dataloader_num_workers=0)
    timeline = Timeline()
    trainer = Trainer(model=model, args=arguments, train_dataset=train, eval_dataset=evaluation,
                      data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=macro_f1,
                      callbacks=[timeline])
    runtime = trainer.train().metrics["train_runtime"]
    rank = int(os.environ.get("RANK", "0"))
    peak = cuda_peak_mib(int(os.environ.get("LOCAL_RANK", "0")) if cuda else None)
    if peak is not None:
        (Path(result_path).parent / f"cuda-peak-rank{rank}.txt").write_text(f"{peak:.1f}\n")
    if rank == 0:
        training = runtime - sum(item["runtime"] for item in timeline.evaluations)
        Path(result_path).write_text(json.dumps({"train_seconds": training,
                                                 "evaluations": timeline.evaluations}) + "\n")
    return 0


if __name__ == "__main__":
    code = main(*sys.argv[1:])
    # the Trainer leaves its process group up; one torn down by the interpreter's exit can abort the process
    # (std::terminate, exit 134: seen once in CI's quick bench)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.exit(code)
