"""The question-answering job: fine-tune a pretrained model for extractive QA with Lightning, under torchrun
(one process per device, any number of nodes), FSDP or DDP, evaluate it by SQuAD's exact match and F1 and export
it with ``save_pretrained``. This module only delegates: data (squad, features, batches), model (module),
checkpoints, progress and export each live in their own."""

from __future__ import annotations

import json
import logging
import os
import warnings
from datetime import timedelta
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.environments import LightningEnvironment, TorchElasticEnvironment
from lightning.pytorch.strategies import DDPStrategy

from trainer_contract import exit_codes, hooks
from trainer_contract.atomic import atomic_write
from trainer_contract.program_settings import FP16_NEEDS_CUDA, QaConfig
from trainer_runtime import process_group
from trainer_runtime.checkpoints.clock import CheckpointClock
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.failures import Refusal
from trainer_runtime.gang import record_attempt
from trainer_runtime.pretrained import run_identity
from trainer_runtime.pretrained.export import RUN_FILES, export_dir, write_summary
from trainer_runtime.pretrained.run import (
    loading_options,
    quiet_transformers,
    require_model,
    resume_from,
)
from trainer_runtime.run_log import RunLog
from trainer_runtime.run_shell import run_logged
from trainer_runtime.sampler import RankBatches
from trainer_runtime.stop import Stopped, StopRequest
from worker.qa import checkpoints, features, squad
from worker.qa.batches import FeatureSet, ResumableLoader
from worker.qa.export import export_model, full_state_dict
from worker.qa.module import Evaluation, QuestionAnswering
from worker.qa.progress import ProgressLines

PREDICTIONS_FILE = "predictions.json"  # SQuAD's own format: question id -> answer text


def _quiet_lightning() -> None:
    """Lightning's banners and tips are not this run's progress: keep its warnings, drop its chatter."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda",
                 "lightning.fabric.utilities.distributed"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*Checkpoint directory .* exists and is not empty.*")
    # under Slurm the processes are torchrun's inside an srun step, which Lightning cannot tell
    warnings.filterwarnings("ignore", message=".*The `srun` command is available on your system.*")
    os.environ.setdefault("LITLOGGER_DISABLE_TIP", "1")


def _data(config: QaConfig, tokenizer, log):
    train = squad.load_split(config.dataset_dir, "train")
    evaluation = squad.load_split(config.dataset_dir, "validation")
    train = train[:config.train_samples] if config.train_samples else train
    evaluation = evaluation[:config.eval_samples] if config.eval_samples else evaluation
    train_features = features.featurize(tokenizer, train, config.max_seq_length, config.doc_stride)
    eval_features = features.featurize(tokenizer, evaluation, config.max_seq_length, config.doc_stride)
    log(f"{len(train)} training questions ({len(train_features)} windows, {train_features.tokens} tokens), "
        f"{len(evaluation)} evaluation questions ({len(eval_features)} windows) from {config.dataset_dir}")
    return evaluation, train_features, eval_features


def _backend(cuda: bool) -> str:
    return "nccl" if cuda else "gloo"


def _strategy(config: QaConfig, env: DistEnv, cuda: bool):
    timeout, backend = timedelta(seconds=config.collective_timeout), _backend(cuda)
    if config.strategy == "fsdp":
        if config.precision == "fp16":
            raise Refusal(exit_codes.BAD_CONFIG, ["PRECISION: fp16 under STRATEGY=fsdp has no gradient scaler here; "
                                                  "use bf16 (its mixed-precision policy) or STRATEGY=ddp"])
        strategy = checkpoints.ShardedModelParallelStrategy(
            data_parallel_size=env.world_size, tensor_parallel_size=1, save_distributed_checkpoint=True,
            process_group_backend=backend, timeout=timeout)
        return strategy, "32-true"
    precision = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}[config.precision]
    return DDPStrategy(process_group_backend=backend, timeout=timeout), precision


def run(config: QaConfig, env: DistEnv) -> int:
    return run_logged(config, env, _train)


def _load(config: QaConfig):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    quiet_transformers()
    require_model(config.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(config.model_dir)
    torch.manual_seed(config.seed)  # the new answer layer is the same on every rank (FSDP shards, never broadcasts)
    model = AutoModelForQuestionAnswering.from_pretrained(config.model_dir,
                                                          **loading_options(config.attn_implementation))
    return tokenizer, model


def _trainer(config: QaConfig, env: DistEnv, cuda: bool, progress: ProgressLines, stop: StopRequest,
             store: CheckpointStore) -> L.Trainer:
    strategy, precision = _strategy(config, env, cuda)
    saving = checkpoints.Checkpointing(store, config.checkpoint_every_steps, stop=stop,
                                       clock=CheckpointClock(config.checkpoint_every_seconds, votes=env.is_rank0,
                                                             nodes=env.nodes, log=store.log))
    return L.Trainer(accelerator="gpu" if cuda else "cpu", devices=env.local_world_size, num_nodes=env.nodes,
                     strategy=strategy, precision=precision, max_epochs=config.epochs,
                     callbacks=[progress, saving, _RecordsAttempt(env, config.output_dir)], logger=False, enable_checkpointing=False,
                     # torchrun's ranks, even inside a Slurm step (Lightning would otherwise read SLURM_PROCID)
                     plugins=[checkpoints.AtomicCheckpointIO(),
                              TorchElasticEnvironment() if env.under_launcher else LightningEnvironment()],
                     enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                     num_sanity_val_steps=0, default_root_dir=config.output_dir)


class _RecordsAttempt(L.Callback):
    """trainer_runtime.gang.record_attempt once Lightning's process group is up, as the other programs do."""

    def __init__(self, env: DistEnv, output_dir: Path):
        self.env, self.output_dir = env, output_dir

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            record_attempt(self.env, self.output_dir)


def _export(config: QaConfig, model, tokenizer, state: dict, evaluation: Evaluation, summary: dict, log) -> None:
    destination = export_dir(config, model.config.model_type, "squad")
    export_model(model, state, tokenizer, destination)
    atomic_write(config.output_dir / PREDICTIONS_FILE, json.dumps(evaluation.predictions, indent=1).encode())
    scores = {"exact_match": evaluation.scores["exact_match"], "f1": evaluation.scores["f1"]}
    write_summary(config.output_dir, {**scores, **summary}, str(destination))
    log(f"exported to {destination} (exact match {scores['exact_match']:.2f}, F1 {scores['f1']:.2f})")


def _train(config: QaConfig, env: DistEnv, log, store: CheckpointStore) -> int:
    stop = StopRequest()  # during set-up a signal ends the process at once: nothing to save yet
    hooks.point("start", rank=env.rank, output_dir=config.output_dir, under_launcher=env.under_launcher, log=log)
    _quiet_lightning()
    cuda = torch.cuda.is_available()
    if config.precision == "fp16" and not cuda:
        raise Refusal(exit_codes.BAD_CONFIG, [f"PRECISION: {FP16_NEEDS_CUDA}; use bf16 or fp32"])
    tokenizer, model = _load(config)
    try:
        evaluation_questions, train_features, eval_features = _data(config, tokenizer, log)
    except (squad.DatasetError, ValueError) as error:
        raise Refusal(exit_codes.DATA_UNAVAILABLE, [str(error)]) from None
    now = run_identity.record(config, env.world_size)
    found = resume_from(config, now, store, log, env.is_rank0, (*RUN_FILES, PREDICTIONS_FILE))
    train_batches = RankBatches(len(train_features), config.batch_size, env.rank, env.world_size, config.seed, True)
    eval_batches = RankBatches(len(eval_features), config.batch_size, env.rank, env.world_size, config.seed, False)
    pad = tokenizer.pad_token_id or 0
    loaders = (ResumableLoader(FeatureSet(train_features, True), train_batches, pad),
               ResumableLoader(FeatureSet(eval_features, False), eval_batches, pad))
    evaluation = Evaluation(evaluation_questions, eval_features, config.max_answer_length)
    run_log = RunLog(env.rank, config.output_dir, config.log_interval, config.tensorboard, env.group_rank)
    progress = ProgressLines(run_log)
    module = QuestionAnswering(model, learning_rate=config.learning_rate,
                               total_steps=len(train_batches) * config.epochs, shard=config.strategy == "fsdp",
                               shard_dtype=torch.bfloat16 if config.precision == "bf16" else None,
                               train_batches=train_batches, evaluation=evaluation, record=now,
                               evaluated=progress.evaluated)
    # this round's process group, which Lightning then keeps (it starts one only where none is up)
    process_group.init_round_group(_backend(cuda), env.nodes, env.rank, env.world_size,
                                   timedelta(seconds=config.collective_timeout))
    trainer = _trainer(config, env, cuda, progress, stop, store)
    stop.defer()
    try:
        state = _fit(trainer, module, loaders, found[0] if found else None, evaluation)
    except Stopped as stopped:  # the step reached is checkpointed: the next start goes on from it
        return stop.ended(stopped, log)
    finally:
        run_log.close()
    if env.is_rank0:
        _export(config, model, tokenizer, state, evaluation, {"step": trainer.global_step, **now}, log)
    hooks.point("completed", rank=env.rank)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return exit_codes.OK


def _fit(trainer: L.Trainer, module: QuestionAnswering, loaders: tuple, checkpoint: Path | None,
         evaluation: Evaluation) -> dict:
    """Train (from ``checkpoint``, read through the runtime's allow-list), then the trained weights, whole."""
    train_loader, eval_loader = loaders
    trainer.fit(module, train_loader, eval_loader, ckpt_path=checkpoint, weights_only=True)
    if not evaluation.scores:  # resumed at the very end: nothing trained, evaluate the model as it is
        trainer.validate(module, eval_loader, verbose=False)
    return full_state_dict(module.model)
