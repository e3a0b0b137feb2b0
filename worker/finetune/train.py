"""The text-classification job: fine-tune a pretrained Hub model with plain PyTorch under torchrun
(one process per device, any number of nodes), DDP and automatic mixed precision, evaluate it at each epoch's
end, checkpoint every CHECKPOINT_EVERY_STEPS steps and on SIGTERM, resume exactly, and export it with
``save_pretrained``. This module only delegates: data (texts), evaluation, and what the
transformer workloads share (trainer_runtime.pretrained)."""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.distributed as dist

from trainer_contract import exit_codes, hooks
from trainer_contract.atomic import atomic_write
from trainer_contract.program_settings import FinetuneConfig
from trainer_runtime import process_group
from trainer_runtime.checkpoints import single_file
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.gang import join
from trainer_runtime.goodput import goodput_account
from trainer_runtime.pretrained import checkpoint_record
from trainer_runtime.pretrained.batches import RankBatches, collate
from trainer_runtime.pretrained.export import export_dir, save_pretrained
from trainer_runtime.pretrained.loop import Loop, Stopped
from trainer_runtime.pretrained.run import Refusal, quiet_transformers, require_model, resume_from, run_logged
from trainer_runtime.pretrained.run_log import RunLog
from trainer_runtime.stop import StopRequest
from worker.finetune import texts as text_data
from worker.finetune.evaluation import evaluate

SUMMARY_FILE = "summary.json"


def run(config: FinetuneConfig, env: DistEnv) -> int:
    return run_logged(config, env, _train)


def _model(config: FinetuneConfig, data: text_data.Texts):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    quiet_transformers()
    require_model(config.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(config.model_dir)
    names = data.label_names or [str(number) for number in
                                 range(max(data.train.labels + data.evaluation.labels) + 1)]
    torch.manual_seed(config.seed)  # the new head: the same on every rank
    # ignore_mismatched_sizes: a checkpoint's own head for another number of classes is replaced, not an error
    model, loading = AutoModelForSequenceClassification.from_pretrained(
        config.model_dir, num_labels=len(names), id2label=dict(enumerate(names)),
        label2id={name: number for number, name in enumerate(names)}, ignore_mismatched_sizes=True,
        output_loading_info=True, use_safetensors=True)
    return tokenizer, model, loading


def _load_data(config: FinetuneConfig, log):
    try:
        data = text_data.load(config)
    except text_data.DatasetError as error:
        raise Refusal(exit_codes.DATA_UNAVAILABLE, [str(error)]) from None
    tokenizer, model, loading = _model(config, data)
    train = text_data.tokenized(tokenizer, data.train, config.max_seq_length)
    evaluation = text_data.tokenized(tokenizer, data.evaluation, config.max_seq_length)
    log(f"{len(train)} training texts ({sum(len(item['input_ids']) for item in train)} tokens), "
        f"{len(evaluation)} {data.evaluation_split} texts, {model.config.num_labels} classes, from "
        f"{config.dataset_dir}")
    new = sorted(set(loading["missing_keys"]) | {key for key, *_ in loading.get("mismatched_keys", ())})
    log(f"new weights for the task: {', '.join(new) or 'none'}; unused from the checkpoint: "
        f"{', '.join(sorted(loading['unexpected_keys'])) or 'none'}")
    return tokenizer, model, train, evaluation


def _train(config: FinetuneConfig, env: DistEnv, log, store: CheckpointStore) -> int:
    stop = StopRequest()  # during set-up a signal ends the process at once: nothing to save yet
    device = join(config, env, log).device  # and the fault-injection seam "start"
    tokenizer, model, train, evaluation = _load_data(config, log if env.is_rank0 else lambda message: None)
    now = checkpoint_record.record(config, env.world_size)
    found = resume_from(config, now, store, log)
    batches = RankBatches(len(train), config.batch_size, env.rank, env.world_size, config.seed, True)
    pad_id = tokenizer.pad_token_id or 0
    loop = Loop(model, train, batches, lambda items: {key: value for key, value in collate(items, pad_id).items()
                                                      if key != "index"}, config, device, env)
    if found:
        loop.load_state_dict(single_file.read_payload(found[0]))
    run_log = RunLog(env.rank, config.output_dir, config.log_interval, config.tensorboard, env.group_rank)
    stop.defer()
    try:
        result = loop.epochs(run_log, stop, store, now,
                             _evaluation(config, env, loop, evaluation, model.config.num_labels, pad_id))
    except Stopped:  # rank 0 checkpointed the step reached: the next start goes on from it
        code = exit_codes.TERMINATED if stop.requested else exit_codes.PEER_LOST
        log(f"stopped on request at step {loop.step}, checkpointed; exiting {code} ({exit_codes.meaning(code)})")
        return code
    finally:
        run_log.close()
    if env.is_rank0:
        _export(config, model, tokenizer, {**result, "step": loop.step, **now}, log)
    hooks.point("completed", rank=env.rank)
    dist.barrier()
    process_group.destroy_process_group()
    return exit_codes.OK


def _evaluation(config: FinetuneConfig, env: DistEnv, loop: Loop, evaluation: list, num_labels: int, pad_id: int):
    """What ends each epoch: accuracy, macro F1 and loss over the whole evaluation split."""
    def evaluated() -> tuple[dict[str, float], str]:
        result = evaluate(loop.model, evaluation, num_labels, config.batch_size, pad_id, loop.precision, loop.device,
                          env.rank, env.world_size)
        return result, f"accuracy {result['accuracy']:.2f}%, macro F1 {result['f1']:.2f}, loss {result['loss']:.4f}"

    return evaluated


def _export(config: FinetuneConfig, model, tokenizer, summary: dict[str, Any], log) -> None:
    destination = export_dir(config, model.config.model_type, "classifier")
    save_pretrained(model, tokenizer, destination)
    atomic_write(config.output_dir / SUMMARY_FILE, json.dumps(
        {**summary, **goodput_account().summary(), "export": str(destination)}, indent=2).encode())
    log(f"exported to {destination} (accuracy {summary['accuracy']:.2f}%, macro F1 {summary['f1']:.2f})")
