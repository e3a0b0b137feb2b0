"""The baseline of python -m bench.transformers's SFT rows: TRL's SFTTrainer fine-tuning the same causal LM with the
same LoRA adapters, on the very same token ids and learnt-token labels, with the same recipe as python -m worker.sft
(batch per process, epochs, AdamW's learning rate, linear decay, clipping, bf16 autocast, DDP over gloo, or NCCL
with a GPU per process where CUDA is there), under torchrun:

    torchrun --standalone --nproc-per-node 2 -m bench.trl_sft_baseline MODEL_DIR DATASET_DIR RESULT_DIR

The examples are read and tokenized by worker.sft's own readers (not timed) and handed to SFTTrainer already
tokenized, with their labels (so that TRL learns exactly the tokens worker.sft learns). Rank 0 writes the
training seconds to RESULT_DIR/result.json and the adapter to RESULT_DIR/adapter; every rank its peak resident
memory, and on CUDA its peak CUDA memory allocated (cuda-peak-rank<R>.txt). Settings come from the environment, as
worker.sft reads them (trainer_contract.variables.SftConfig)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from trainer_contract.config_reading import load_config
from trainer_contract.program_settings import SftConfig
from trainer_runtime.usage_log import cuda_peak_mib, peak_mib


def main(model_dir: str, dataset_dir: str, result_dir: str) -> int:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from trainer_runtime.pretrained.tables import splits
    from worker.sft.train import examples_of, lora_of

    config = load_config({**os.environ, "MODEL_DIR": model_dir, "DATASET_DIR": dataset_dir}, config_class=SftConfig)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    train = Dataset.from_list([{"input_ids": example.input_ids, "labels": example.labels}
                               for example in examples_of(config, tokenizer, splits(config)[0], config.train_samples)])
    lora = lora_of(config)
    assert lora is not None, "the baseline compares LoRA runs"
    targets = "all-linear" if lora.target_modules == ("all-linear",) else list(lora.target_modules)
    result = Path(result_dir)
    cuda = torch.cuda.is_available()  # as worker.sft chooses (trainer_runtime.gang)
    arguments = SFTConfig(
        output_dir=str(result / "trainer-output"), per_device_train_batch_size=config.batch_size,
        num_train_epochs=config.epochs, learning_rate=config.learning_rate, weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm, lr_scheduler_type=config.lr_scheduler_type, warmup_steps=config.warmup_steps,
        bf16=config.precision == "bf16", use_cpu=not cuda, ddp_backend="nccl" if cuda else "gloo", eval_strategy="no",
        save_strategy="no", logging_strategy="no", report_to="none", disable_tqdm=True, seed=config.seed,
        dataloader_num_workers=0,
        max_length=config.max_seq_length, packing=False, gradient_checkpointing=config.activation_checkpointing,
        dataset_num_proc=None)
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True), args=arguments,
        train_dataset=train, processing_class=tokenizer,
        peft_config=LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                               task_type="CAUSAL_LM"))
    seconds = trainer.train().metrics["train_runtime"]
    rank = int(os.environ.get("RANK", "0"))
    (result / f"peak-rank{rank}.txt").write_text(f"{peak_mib():.1f}\n")
    cuda_peak = cuda_peak_mib(int(os.environ.get("LOCAL_RANK", "0")) if cuda else None)
    if cuda_peak is not None:
        (result / f"cuda-peak-rank{rank}.txt").write_text(f"{cuda_peak:.1f}\n")
    if rank == 0:
        trainer.model.save_pretrained(result / "adapter")
        (result / "result.json").write_text(json.dumps({"train_seconds": seconds}) + "\n")
    return 0


if __name__ == "__main__":
    code = main(*sys.argv[1:])
    # the Trainer leaves its process group up; one torn down by the interpreter's exit can abort the process
    # (std::terminate, exit 134: seen once in CI's quick bench)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(code)
