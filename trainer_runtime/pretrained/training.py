"""The training skeleton of the programs whose loop is this project's own (worker.finetune, worker.sft), in
torchtitan's TrainSpec shape: a program names its parts (a Workload: its data and model, its batches' collate, its
evaluation and its export) and the skeleton runs them the same way for each: join the gang, resume (refused with
another model, tokenizer, data or shaping setting), train under the stop agreement, export and write the summary."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from trainer_contract import exit_codes, hooks, replica_groups
from trainer_runtime import process_group
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.distenv import DistEnv
from trainer_runtime.gang import from_rank0, join, record_attempt
from trainer_runtime.pretrained import replicated, run_identity, shared_load, token_cache
from trainer_runtime.pretrained.batches import accumulation_steps
from trainer_runtime.pretrained.export import write_summary
from trainer_runtime.pretrained.loop import Loop, Weigh, examples_in
from trainer_runtime.pretrained.run import require_model, resume_from
from trainer_runtime.run_log import RunLog
from trainer_runtime.run_shell import run_logged
from trainer_runtime.sampler import RankBatches
from trainer_runtime.stop import Stopped, StopRequest

Log = Callable[[str], None]
Evaluated = Callable[[], "tuple[dict[str, float], str]"]


@dataclass(frozen=True)
class Loaded:
    """What a workload's load gives the skeleton: the tokenizer, the model to train and the two sets."""

    tokenizer: Any
    model: Any
    train: Sequence
    evaluation: Sequence


@dataclass(frozen=True)
class Workload:
    """A program's parts. ``load(config, log, tokenizing, weights)``: rank 0's log only; ``tokenizing.tokenized``
    gives the splits from the token cache, made once (trainer_runtime.pretrained.token_cache); without ``weights``
    the model is built on the meta device from its configuration, no weight read (they come from rank 0, or from the
    checkpoint the run resumes from: trainer_runtime.pretrained.shared_load). ``collate(config, loaded)``: a
    batch's tensors from its examples. ``evaluation(config, env, loop, loaded, log)``: what ends each epoch, scores and their line.
    ``export(config, loop, loaded, summary, log)``: run on every rank (it may gather a sharded model), rank 0 writes
    the trained model and returns what it wrote (summary.json's "export"). ``records_data``: a resume is refused
    with other data too. ``strategy(config)``: the loop's strategy word. ``weigh(batch)``: what the model's loss on
    a batch is the mean over (GRADIENT_ACCUMULATION_STEPS weights each batch of a step by it). ``trains_every_weight
    (config)``: a checkpoint then holds the whole model, and a resume reads no pretrained weight."""

    load: Callable[[Any, Log, token_cache.Tokenizing, bool], Loaded]
    collate: Callable[[Any, Loaded], Callable[[list], dict]]
    evaluation: Callable[[Any, DistEnv, Loop, Loaded, Log], Evaluated]
    export: Callable[[Any, Loop, Loaded, dict, Log], Any]
    records_data: bool = False
    strategy: Callable[[Any], str] = lambda config: "ddp"
    weigh: Weigh = examples_in
    trains_every_weight: Callable[[Any], bool] = lambda config: True
    module: str = ""  # the program's (python -m MODULE): whether it runs as replica groups (trainer_contract's table)


def best_model(loop: Loop, store: CheckpointStore, last: dict[str, float], log: Log) -> dict[str, Any]:
    """With METRIC_FOR_BEST_MODEL, the best checkpoint's weights into the model (every rank: the export may gather
    them), its scores and where they came from for summary.json; nothing where the last step is the best or no
    metric is set. A best checkpoint no longer on the volume (a run restored from the bucket keeps the newest
    only) leaves the last model, said."""
    best = loop.best.best if loop.best.tracking else None
    if best is None or best.get("metric") != loop.best.metric:  # none, or one by a metric no longer asked for
        return {}
    said = {"best_checkpoint": {key: best[key] for key in ("checkpoint", "step", "metric", "value")}}
    if best["step"] == loop.step:
        log(f"the last step is the best by {best['metric']} ({best['value']:.4f}): exporting it")
        return said
    path = store.directory / best["checkpoint"]
    if not path.exists():
        log(f"the best checkpoint by {best['metric']}, {best['checkpoint']}, is no longer on the volume: exporting "
            "the last model")
        return {}
    loop.restore(path, progress=False)
    log(f"exporting the best checkpoint by {best['metric']}, {best['checkpoint']} ({best['value']:.4f} at step "
        f"{best['step']}; the last step's {last.get(best['metric'], float('nan')):.4f})")
    return {**best["scores"], **said}


def _record_and_key(workload: Workload, config: Any, world_size: int) -> tuple[dict[str, Any], str]:
    now = run_identity.record(config, world_size, data=workload.records_data)
    return now, token_cache.key_of(now, config)


def _batches(config: Any, env: DistEnv, examples: int, groups: replica_groups.ReplicaGroups | None) -> RankBatches:
    """An optimizer step's examples on this rank: GRADIENT_ACCUMULATION_STEPS batches (the loop splits them); with
    replica groups the whole step's, in the epoch's order, which the step's quorum shares (replicated.py)."""
    if groups is None:
        return RankBatches(examples, config.batch_size * accumulation_steps(config, env.world_size), env.rank,
                           env.world_size, config.seed, True)
    processes = env.world_size * groups.groups
    return RankBatches(examples, config.batch_size * accumulation_steps(config, processes) * processes, 0, 1,
                       config.seed, True, pad=False)


def _silent(message: str) -> None:
    pass


def _finish(workload: Workload, config: Any, env: DistEnv, loop: Loop, loaded: Loaded, log: Log,
            now: dict[str, Any], result: dict[str, Any]) -> None:
    """The export (every rank: it may gather a sharded model) and rank 0's summary.json, the run's record in it."""
    summary = {**result, **now}
    written = workload.export(config, loop, loaded, summary, log)
    if env.is_rank0:
        write_summary(config.output_dir, summary, written)
    hooks.point("completed", rank=env.rank)


def run(workload: Workload, config: Any, env: DistEnv) -> int:
    """The workload's run in every program's shell (trainer_runtime.run_shell), its finished run summary.json."""
    return run_logged(config, env, functools.partial(train, workload))


def train(workload: Workload, config: Any, env: DistEnv, log: Log, store: CheckpointStore) -> int:
    """The run, for trainer_runtime.run_shell.run_logged: its exit code."""
    groups = replica_groups.from_environ(os.environ)
    if groups is not None:
        replicated.refuse(config, workload.module)
    stop = StopRequest()  # during set-up a signal ends the process at once: nothing to save yet
    gang = join(config, env, log)  # and the fault-injection seam "start"
    record_attempt(env, config.output_dir)
    require_model(config.model_dir)  # before the record's digests of its files
    world = env.world_size * (groups.groups if groups is not None else 1)  # every group's processes: a step's
    now, cache_key = from_rank0(env, lambda: _record_and_key(workload, config, world))
    tokenizing = token_cache.Tokenizing(config, env, gang.store, cache_key, log)
    store.restore_from_bucket(config.resume, env)
    found = resume_from(config, now, store, log, env.is_rank0)
    # a checkpoint of a run that trains every weight holds the whole model: its weights are read once, from it
    whole_in_checkpoint = found is not None and workload.trains_every_weight(config)
    if found is not None and whole_in_checkpoint:
        log(f"every weight comes from {found[0].name}: the pretrained weights are not read")
    weights = shared_load.reads_weights(workload.strategy(config)) and not whole_in_checkpoint
    loaded = workload.load(config, log if env.is_rank0 else lambda message: None, tokenizing, weights)
    loop = Loop(loaded.model, loaded.train, _batches(config, env, len(loaded.train), groups),
                workload.collate(config, loaded), config, gang.device, env, workload.strategy(config), workload.weigh,
                log)
    if found:
        loop.restore(found[0])
    if groups is not None:
        return replicated.train(loop, groups, env, log if env.is_rank0 else _silent, stop, store, now,
                                workload.evaluation(config, env, loop, loaded, log),
                                functools.partial(_finish, workload, config, env, loop, loaded, log, now))
    run_log = RunLog(env.rank, config.output_dir, config.log_interval, config.tensorboard, env.group_rank)
    stop.defer()
    failed = True
    try:
        result = loop.epochs(run_log, stop, store, now, workload.evaluation(config, env, loop, loaded, log))
        failed = False
    except Stopped as stopped:  # rank 0 checkpointed the step reached: the next start goes on from it
        failed = False
        return stop.ended(stopped, log)
    finally:
        loop.writes.close(failed, log)  # before the shell's mirror uploads the newest
        run_log.close()
    _finish(workload, config, env, loop, loaded, log, now, {**result, **best_model(loop, store, result, log),
                                                            "step": loop.step})
    dist.barrier()
    process_group.destroy_process_group()
    return exit_codes.OK
