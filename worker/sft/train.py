"""Supervised fine-tuning of a causal language model under torchrun: LoRA adapters (peft) or a full fine-tune,
DDP or FSDP2 with automatic mixed precision, evaluation loss and perplexity at each epoch's end with a few greedy
completions in the log, checkpoints every CHECKPOINT_EVERY_STEPS steps and on SIGTERM (the adapters alone under
LoRA), an exact resume (refused with another model, tokenizer, data set, LoRA shape or shaping setting), and the
export (worker/sft/model.py). This module names its parts (a Workload: the examples, the model, the batches'
collate, evaluation and completions, the export) and the training skeleton runs them
(trainer_runtime.pretrained.training)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainer_contract import exit_codes
from trainer_contract.program_settings import SftConfig
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import Refusal
from trainer_runtime.pretrained import shared_load, tables, training
from trainer_runtime.pretrained.export import export_dir
from trainer_runtime.pretrained.loop import Loop
from trainer_runtime.pretrained.run import quiet_transformers
from trainer_runtime.pretrained.tables import DatasetError
from trainer_runtime.pretrained.token_cache import Codec, TokenizedSplits, Tokenizing
from trainer_runtime.pretrained.training import Loaded, Workload
from worker.sft import examples as sft_examples
from worker.sft import model as sft_model
from worker.sft.loop import collate, complete, evaluate, supervised_tokens


def run(config: SftConfig, env: DistEnv) -> int:
    return training.run(SFT, config, env)


def lora_of(config: SftConfig) -> sft_model.Lora | None:
    if config.lora_rank == 0:
        return None
    targets = tuple(name.strip() for name in config.lora_target_modules.split(",") if name.strip())
    return sft_model.Lora(config.lora_rank, config.lora_alpha, config.lora_dropout, targets)


def examples_of(config: SftConfig, tokenizer: Any, split: tables.Split, limit: int,
                say: Callable[[str], None] | None = None) -> list[sft_examples.Example]:
    """One split's examples as worker.sft trains or evaluates on them: tokenized, the first ``limit`` rows (0: all),
    packed for training with PACKING, those left out that MAX_SEQ_LENGTH cut to no supervised token, said through
    ``say`` (the benchmarks give TRL exactly these)."""
    table = split.first(limit).rows
    columns = {"messages": config.messages_column, "prompt": config.prompt_column,
               "completion": config.completion_column}
    made = sft_examples.tokenized(tokenizer, table, config.max_seq_length, split.source, columns)
    packed = config.packing and split.name == "train"
    if packed:
        made = sft_examples.pack(made, config.max_seq_length)
    kept = sft_examples.learnable(made)
    unit = "blocks" if packed else "examples"
    if not kept:
        raise DatasetError(f"none of the {len(made)} {unit} of {split.source} has a supervised token within "
                           f"MAX_SEQ_LENGTH={config.max_seq_length} tokens (the prompts fill it): raise "
                           "MAX_SEQ_LENGTH or shorten the prompts")
    if say is not None and len(kept) < len(made):
        say(f"{len(made) - len(kept)} of the {len(made)} {unit} of {split.source} left out: MAX_SEQ_LENGTH="
            f"{config.max_seq_length} cut away every supervised token of each")
    return kept


# An example in the token cache: its two columns of token ids; a label is IGNORE or a token.
CODEC = Codec(encode=lambda example: {"input_ids": example.input_ids, "labels": example.labels},
              decode=lambda columns: sft_examples.Example(columns["input_ids"], columns["labels"]),
              ranges=lambda vocabulary: {"input_ids": (0, vocabulary - 1),
                                         "labels": (sft_examples.IGNORE, vocabulary - 1)})


def _tokenized(config: SftConfig, tokenizer: Any, log) -> TokenizedSplits:
    """The splits read and tokenized (rank 0, once: the token cache keeps them), with what the start line says."""
    train_rows, held_out = tables.splits(config)
    train = examples_of(config, tokenizer, train_rows, config.train_samples, log)
    evaluation = examples_of(config, tokenizer, held_out, config.eval_samples, log)
    return TokenizedSplits(train, evaluation, {"evaluation_split": held_out.name, "evaluation_source": held_out.source,
                                               "training_mix": tables.mixed_source(config, train_rows),
                                               "supervised_tokens": sum(example.supervised for example in train)})


def _load(config: SftConfig, log, tokenizing: Tokenizing, weights: bool) -> Loaded:
    from transformers import AutoTokenizer

    quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(config.model_dir)
    if config.chat_template_path is not None:  # rendered with it and exported with it (save_pretrained keeps it)
        tokenizer.chat_template = sft_examples.chat_template_from(config.chat_template_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:  # before the model loads: a refusal comes at once
        data = tokenizing.tokenized(CODEC, len(tokenizer), lambda: _tokenized(config, tokenizer, log))
    except DatasetError as error:
        raise Refusal(exit_codes.DATA_UNAVAILABLE, [str(error)]) from None
    torch.manual_seed(config.seed)  # the adapters' initial weights: the same on every rank
    model = sft_model.load(config.model_dir, lora_of(config), config.activation_checkpointing,
                           config.attn_implementation, weights=weights)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    adapted = f"LoRA rank {config.lora_rank}" if config.lora_rank else "full fine-tune"
    facts = data.facts
    log(f"{len(data.train)} training {'blocks' if config.packing else 'examples'} "
        f"({facts['supervised_tokens']} supervised tokens), {len(data.evaluation)} {facts['evaluation_split']} "
        f"examples, from {config.dataset_dir} {tables.sources_said(facts)}; {adapted}: "
        f"{trainable} of {total} weights train, under {config.strategy}{shared_load.said(config.strategy) if weights else ''}"
        f"{', activations recomputed' if config.activation_checkpointing else ''}")
    return Loaded(tokenizer, model, data.train, data.evaluation)


def _evaluation(config: SftConfig, env: DistEnv, loop: Loop, loaded: Loaded, log):
    """What ends each epoch: the evaluation loss and perplexity, and rank 0 logs the sample prompts' completions."""
    prompts = [prompt.strip() for prompt in config.sample_prompts.split("||") if prompt.strip()]

    def evaluated() -> tuple[dict[str, float], str]:
        result = evaluate(loop.model, loaded.evaluation, config.batch_size, loaded.tokenizer.pad_token_id,
                          loop.precision, loop.device, env.rank, env.world_size)
        completions = complete(loop.model, loaded.tokenizer, prompts, loop.device)
        for prompt, completion in zip(prompts, completions, strict=True) if env.is_rank0 else ():
            log(f"sample: {prompt!r} -> {completion!r}")
        return result, f"evaluation loss {result['loss']:.4f}, perplexity {result['perplexity']:.2f}"

    return evaluated


def _whole_model(config: SftConfig, loop: Loop) -> Any:
    """The trained model whole on rank 0 (None elsewhere): the training copy itself, or under fsdp the pretrained
    model with the gathered trained weights put in (a collective)."""
    if not loop.strategy.shards_parameters:
        return loop.model
    trained, _ = loop.strategy.trainable_state(optimizer=False)
    return sft_model.rebuilt(config.model_dir, lora_of(config), trained) if loop.rank == 0 else None


def _export(config: SftConfig, loop: Loop, loaded: Loaded, summary: dict[str, Any], log) -> list[str] | None:
    """Every rank gathers (under fsdp); rank 0 exports the adapters (and the merged model) or the whole model."""
    model = _whole_model(config, loop)
    if loop.rank != 0:
        return None
    base = model.get_base_model() if sft_model.is_lora(model) else model
    destination = export_dir(config, base.config.model_type, "sft")
    written = sft_model.export(model, loaded.tokenizer, destination, config.export_merged)
    log(f"exported to {', '.join(str(path) for path in written)} (evaluation loss {summary['loss']:.4f}, "
        f"perplexity {summary['perplexity']:.2f})")
    return [str(path) for path in written]


SFT = Workload(module="worker.sft", load=_load,
               collate=lambda config, loaded: lambda examples: collate(examples, loaded.tokenizer.pad_token_id),
               evaluation=_evaluation, export=_export, records_data=True, strategy=lambda config: config.strategy,
               weigh=supervised_tokens, trains_every_weight=lambda config: config.lora_rank == 0)
