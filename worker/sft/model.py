"""The model supervised fine-tuning trains: any ``AutoModelForCausalLM`` from MODEL_DIR (safetensors weights only: a
pickled ``pytorch_model.bin`` could run code when loaded), with LoRA adapters through peft, or whole (a full
fine-tune); what a checkpoint holds of it and what the export writes.

- Under LoRA only the adapters train: a checkpoint holds their weights and optimizer state (the strategy's
  ``trainable_state``: a few MiB, not the model), and a resume puts them back into the same base model.
- The export writes the adapter with ``save_pretrained`` (``adapter/``: loadable with
  ``PeftModel.from_pretrained(base, path)``) and, where asked, the merged model with its tokenizer (``merged/``:
  loadable with ``AutoModelForCausalLM.from_pretrained``, giving the logits of base + adapter). A full fine-tune
  exports the model itself (``merged/``).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from trainer_contract import exit_codes
from trainer_runtime.failures import Refusal
from trainer_runtime.pretrained import shared_load
from trainer_runtime.pretrained.export import save_pretrained
from trainer_runtime.pretrained.run import loading_options, require_model

ADAPTER, MERGED = "adapter", "merged"


@dataclass(frozen=True)
class Lora:
    rank: int
    alpha: int  # peft scales the adapters by alpha / rank
    dropout: float
    target_modules: tuple[str, ...]  # module names (q_proj, v_proj, ...), or ("all-linear",)

    def shape(self) -> dict[str, Any]:
        """What a resume must find unchanged (the adapters' tensors and their scale depend on it)."""
        return {**asdict(self), "target_modules": sorted(self.target_modules)}


def load(model_dir: Path, lora: Lora | None, activation_checkpointing: bool = False, attention: str = "auto",
         weights: bool = True) -> Any:
    """The pretrained model from MODEL_DIR, wrapped with fresh LoRA adapters when ``lora`` is given; each decoder
    block's activations recomputed in backward when ``activation_checkpointing`` (non-reentrant: the frozen
    embeddings need no gradient, and the dropout recomputed is the dropout drawn). Without ``weights``: the same
    model built on the meta device from MODEL_DIR's configuration, for a rank that gets its shard of rank 0's
    weights (trainer_runtime.pretrained.shared_load)."""
    from transformers import AutoModelForCausalLM

    require_model(model_dir)
    if weights:
        model = AutoModelForCausalLM.from_pretrained(model_dir, **loading_options(attention))
    else:
        model = shared_load.built_without_weights(AutoModelForCausalLM, model_dir, loading_options(attention))
    if activation_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5.x's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora is None:
        return model
    from peft import LoraConfig, get_peft_model

    targets = "all-linear" if lora.target_modules == ("all-linear",) else list(lora.target_modules)
    try:
        return get_peft_model(model, LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                target_modules=targets, task_type="CAUSAL_LM"))
    except ValueError as error:  # peft's own words: a target module the model does not have
        raise Refusal(exit_codes.BAD_CONFIG, [f"LORA_TARGET_MODULES: {error}"]) from None


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config")


def rebuilt(model_dir: Path, lora: Lora | None, trainable: dict[str, Any]) -> Any:
    """A whole copy of the model on this process (CPU): the pretrained weights with ``trainable`` (a strategy's
    ``trainable_state``, by name) put in; what the export writes when the training copy is sharded. A full
    fine-tune's ``trainable`` is every weight: none of the pretrained ones is read."""
    model = load(model_dir, lora, weights=lora is not None)
    if shared_load.on_meta(model):
        shared_load.materialize(model, torch.device("cpu"))
    result = model.load_state_dict(trainable, strict=False)
    learnt = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    if result.unexpected_keys or learnt - set(trainable):
        raise RuntimeError(f"the trained weights do not fit the model (unexpected: {result.unexpected_keys[:3]}, "
                           f"missing: {sorted(learnt - set(trainable))[:3]})")
    return model


def export(model: Any, tokenizer: Any, directory: Path, merged: bool) -> list[Path]:
    """The adapter (LoRA) and, where asked or for a full fine-tune, the merged model, each with the tokenizer,
    each whole or absent; the directories written."""
    written = []
    if is_lora(model):
        save_pretrained(model, tokenizer, directory / ADAPTER)
        written.append(directory / ADAPTER)
    if merged or not is_lora(model):
        whole = copy.deepcopy(model).merge_and_unload() if is_lora(model) else model
        save_pretrained(whole, tokenizer, directory / MERGED)
        written.append(directory / MERGED)
    return written
