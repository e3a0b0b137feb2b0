"""The text-classification job: fine-tune a pretrained Hub model with plain PyTorch under torchrun
(one process per device, any number of nodes), DDP and automatic mixed precision, evaluate it at each epoch's
end, checkpoint every CHECKPOINT_EVERY_STEPS steps and on SIGTERM, resume exactly, and export it with
``save_pretrained``. This module names its parts (a Workload: data from texts, the model with its new head,
evaluation, export) and the training skeleton runs them (trainer_runtime.pretrained.training)."""

from __future__ import annotations

from typing import Any

import torch

from trainer_contract import exit_codes
from trainer_contract.program_settings import FinetuneConfig
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import Refusal
from trainer_runtime.pretrained import shared_load, tables, token_cache, training
from trainer_runtime.pretrained.batches import collate
from trainer_runtime.pretrained.export import export_dir, save_pretrained
from trainer_runtime.pretrained.loop import Loop
from trainer_runtime.pretrained.run import loading_options, quiet_transformers, require_model
from trainer_runtime.pretrained.token_cache import Codec, TokenizedSplits, Tokenizing
from trainer_runtime.pretrained.training import Loaded, Workload
from worker.finetune import texts as text_data
from worker.finetune.evaluation import evaluate


def run(config: FinetuneConfig, env: DistEnv) -> int:
    return training.run(CLASSIFIER, config, env)


def _model(config: FinetuneConfig, names: list[str], weights: bool) -> tuple[Any, dict[str, Any] | None]:
    """The classifier for ``names`` and what its load found (None: built without ``weights``, on the meta device)."""
    from transformers import AutoModelForSequenceClassification

    labels = {"num_labels": len(names), "id2label": dict(enumerate(names)),
              "label2id": {name: number for number, name in enumerate(names)}}
    if not weights:
        return shared_load.built_without_weights(AutoModelForSequenceClassification, config.model_dir,
                                                 loading_options(config.attn_implementation), **labels), None
    torch.manual_seed(config.seed)  # the new head: the same on every rank
    # ignore_mismatched_sizes: a checkpoint's own head for another number of classes is replaced, not an error
    return AutoModelForSequenceClassification.from_pretrained(
        config.model_dir, **labels, ignore_mismatched_sizes=True, output_loading_info=True,
        **loading_options(config.attn_implementation))


def _codec(tokenizer: Any, config: FinetuneConfig) -> Codec:
    """A text in the token cache: its token ids, its token types where the model has them, its class in a column
    of one (checked against the classes the cache names when read: _load)."""
    from transformers import AutoConfig

    columns = ["input_ids"] + (["token_type_ids"] if "token_type_ids" in tokenizer.model_input_names else [])
    types = getattr(AutoConfig.from_pretrained(config.model_dir), "type_vocab_size", 2) or 2
    return Codec(encode=lambda text: {**{column: text[column] for column in columns}, "labels": [text["labels"]]},
                 decode=lambda stored: {**{column: stored[column] for column in columns},
                                        "labels": stored["labels"][0]},
                 ranges=lambda vocabulary: {"input_ids": (0, vocabulary - 1), "labels": (0, _MOST_CLASSES - 1),
                                            **({"token_type_ids": (0, types - 1)} if len(columns) > 1 else {})})


_MOST_CLASSES = 1 << 20  # a bound for the cache's check; the classes the cache names are the real one


def _tokenized(config: FinetuneConfig, tokenizer: Any) -> TokenizedSplits:
    """The texts read and tokenized (rank 0, once: the token cache keeps them), with what the start line says."""
    data = text_data.load(config)
    names = data.label_names or [str(number) for number in range(max(data.train.labels + data.evaluation.labels) + 1)]
    train = text_data.tokenized(tokenizer, data.train, config.max_seq_length)
    evaluation = text_data.tokenized(tokenizer, data.evaluation, config.max_seq_length)
    return TokenizedSplits(train, evaluation, {
        "label_names": names, "evaluation_split": data.evaluation_split, "evaluation_source": data.evaluation_source,
        "training_mix": data.training_mix,
        "tokens": sum(len(item["input_ids"]) for item in train)})


def _load(config: FinetuneConfig, log, tokenizing: Tokenizing, weights: bool) -> Loaded:
    from transformers import AutoTokenizer

    quiet_transformers()
    require_model(config.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(config.model_dir)
    try:  # before the model loads: a refusal comes at once
        data = tokenizing.tokenized(_codec(tokenizer, config), len(tokenizer), lambda: _tokenized(config, tokenizer))
    except text_data.DatasetError as error:
        raise Refusal(exit_codes.DATA_UNAVAILABLE, [str(error)]) from None
    facts = data.facts
    names = [str(name) for name in facts["label_names"]]
    if any(isinstance(split, token_cache.CachedExamples) and bool((split.values("labels") >= len(names)).any())
           for split in (data.train, data.evaluation)):  # the cache's check knows the vocabulary, not the classes
        raise Refusal(exit_codes.DATA_UNAVAILABLE, [
            f"the tokenized data in {config.output_dir / token_cache.DIRECTORY} has a class outside the {len(names)} it "
            "names: remove that directory and start again"])
    model, loading = _model(config, names, weights)
    log(f"{len(data.train)} training texts ({facts['tokens']} tokens), {len(data.evaluation)} "
        f"{facts['evaluation_split']} texts, {len(names)} classes, from {config.dataset_dir} "
        f"{tables.sources_said(facts)}")
    if loading is None:
        return Loaded(tokenizer, model, data.train, data.evaluation)
    new = sorted(set(loading["missing_keys"]) | {key for key, *_ in loading.get("mismatched_keys", ())})
    log(f"new weights for the task: {', '.join(new) or 'none'}; unused from the checkpoint: "
        f"{', '.join(sorted(loading['unexpected_keys'])) or 'none'}")
    return Loaded(tokenizer, model, data.train, data.evaluation)


def _evaluation(config: FinetuneConfig, env: DistEnv, loop: Loop, loaded: Loaded, log):
    """What ends each epoch: accuracy, macro F1 and loss over the whole evaluation split."""
    num_labels, pad_id = loaded.model.config.num_labels, _pad_id(loaded)

    def evaluated() -> tuple[dict[str, float], str]:
        result = evaluate(loop.model, loaded.evaluation, num_labels, config.batch_size, pad_id, loop.precision,
                          loop.device, env.rank, env.world_size)
        return result, f"accuracy {result['accuracy']:.2f}%, macro F1 {result['f1']:.2f}, loss {result['loss']:.4f}"

    return evaluated


def _pad_id(loaded: Loaded) -> int:
    return loaded.tokenizer.pad_token_id or 0


def _collate(config: FinetuneConfig, loaded: Loaded):
    pad_id = _pad_id(loaded)
    return lambda items: {key: value for key, value in collate(items, pad_id).items() if key != "index"}


def _export(config: FinetuneConfig, loop: Loop, loaded: Loaded, summary: dict[str, Any], log) -> str | None:
    if loop.rank != 0:
        return None
    destination = export_dir(config, loaded.model.config.model_type, "classifier")
    save_pretrained(loaded.model, loaded.tokenizer, destination)
    log(f"exported to {destination} (accuracy {summary['accuracy']:.2f}%, macro F1 {summary['f1']:.2f})")
    return str(destination)


CLASSIFIER = Workload(module="worker.finetune", load=_load, collate=_collate,
                      evaluation=_evaluation, export=_export)
