"""The Slurm target: a JobSpec rendered as one sbatch script (templates/slurm/job.sbatch.j2).

A pure function of the spec, like the Kubernetes target beside it: what every target means comes from the spec
(generator/spec.py); this module owns Slurm's own keys of the values (``SlurmOptions``, the schema's slurm.*),
their checks, and Slurm's spellings, and refuses what cannot work there. Every user string reaches the script
through shlex.quote, or through a pattern that admits no shell or #SBATCH syntax.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from generator.spec import SECRET_STORAGE_KEYS, JobSpec
from generator.targets import Target, register
from generator.templating import Manifest, environment, render_template
from generator.values import describe_value
from trainer_contract import exit_codes, gang_rounds, launcher, replica_groups, storage
from trainer_contract.launcher import TorchrunFlag

LAUNCHERS = {"indexed-trainer": " ".join(launcher.LAUNCHER_COMMAND), "torchrun": "torchrun"}
# Whether the nodes' environment (what slurm.setup activates) can start each launcher, and what to do if not: a
# missing launcher is bad configuration, not a failure to requeue max_restarts times.
LAUNCHER_CHECKS = {
    "indexed-trainer": (
        f"python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(\"{launcher.LAUNCHER_COMMAND[2]}\") is None)'",
        f"{' '.join(launcher.LAUNCHER_COMMAND)} cannot start: install indexed-trainer "
        "(pip install 'indexed-trainer[worker]') in the environment slurm.setup activates, or set "
        "entrypoint.launcher: torchrun for a program of your own"),
    "torchrun": ("command -v torchrun",
                 "torchrun is not on PATH: install PyTorch in the environment slurm.setup activates "
                 "(source .../bin/activate)"),
}
# Where a placed path names the script's shared directory: a NUL, which no value can hold (values refuse control
# characters), so no path of the user's is ever taken for it.
_SHARED = "\0shared_dir\0"
_INERT = re.compile(r"[A-Za-z0-9._/%+,:@=-]*")
# Each task's rank and the rendezvous address, in the shell of the script and of each task.
NODE_RANK = '"$SLURM_NODEID"'
MASTER_ADDR = '"${head_addr:-$head_node}"'


# sbatch options a site may add (slurm.extra_options); the others are set from the values, or would break the
# script's contract (one task per node, the output files, the signal before the time limit, requeue).
SLURM_EXTRA_OPTIONS = frozenset({
    "--constraint", "--exclusive", "--reservation", "--nodelist", "--exclude", "--mail-type", "--mail-user",
    "--comment", "--wckey", "--licenses", "--begin", "--dependency", "--hint", "--gpus-per-node",
    "--gpu-bind", "--mem-bind", "--cpu-freq", "--switches", "--network", "--prefer", "--priority", "--nice",
    "--core-spec", "--thread-spec", "--tmp", "--spread-job", "--use-min-nodes", "--oversubscribe",
})
_SBATCH_OPTION = re.compile(r"^(--[a-z][a-z-]*)(=[A-Za-z0-9._:,@%+/=-]+)?$")




@dataclass(frozen=True)
class SlurmOptions:
    """The values' slurm.* keys."""

    partition: str | None
    account: str | None
    qos: str | None
    time_limit: str
    shared_dir: str | None
    extra_options: tuple[str, ...]
    setup: tuple[str, ...]


def slurm_options(values: Mapping[str, Any]) -> SlurmOptions:
    slurm = values["slurm"]
    return SlurmOptions(slurm["partition"], slurm["account"], slurm["qos"], slurm["time_limit"],
                        slurm["shared_dir"], tuple(slurm["extra_options"]), tuple(slurm["setup"]))


def option_problems(spec: JobSpec, options: SlurmOptions) -> Iterable[str]:
    """What is wrong with the slurm.* values themselves."""
    for index, option in enumerate(options.extra_options):
        match = _SBATCH_OPTION.match(option)
        if not match:
            yield (f"slurm.extra_options[{index}]: {describe_value(option)} must be --name or --name=value (value: "
                   "letters, digits and ._:,@%+/=-)")
        elif match.group(1) not in SLURM_EXTRA_OPTIONS:
            yield (f"slurm.extra_options[{index}]: {match.group(1)} is not an option gen-manifests lets you add "
                   f"(allowed: {', '.join(sorted(SLURM_EXTRA_OPTIONS))})")
        elif match.group(1) == "--constraint" and spec.gpu.accelerator is not None:
            yield (f"slurm.extra_options[{index}]: --constraint and resources.gpu.accelerator (rendered as "
                   "--constraint on Slurm) both constrain the nodes; keep one")
    shared = options.shared_dir
    if shared and "//" in shared:
        yield (f"slurm.shared_dir: {describe_value(shared)} has an empty path component ('//'), as an unset "
               "variable leaves it (/scratch/$USER/mnist with USER empty); write the whole path")


def slurm_problems(spec: JobSpec) -> Iterable[str]:
    """What would be wrong on Slurm (Kubernetes objects the script cannot reach), each naming its key."""
    for index, variable in enumerate(spec.env):
        if variable.value_from is not None:
            yield (f"env[{index}].valueFrom: Slurm has no Secrets or ConfigMaps; set {variable.name} "
                   "in the environment sbatch is run from, or in slurm.setup")
    if spec.env_from_secrets:
        yield "env_from_secrets: Slurm has no Secrets; export the variables in slurm.setup instead"
    if spec.extra_volumes:
        yield "extra_volumes: Slurm mounts no volumes; use the path of a shared filesystem instead"
    if spec.replica_groups and spec.most_replicas > spec.replicas:
        yield (f"fault_tolerance.max_replicas: a Slurm allocation does not grow to {spec.most_replicas} nodes while it "
               "runs; set it to null (or to replicas) for --target slurm")


@dataclass(frozen=True)
class BatchScript:
    """What the batch script needs beside the spec: Slurm's own options and spellings."""

    cpus: int
    memory_mib: int
    time_limit: str
    options: tuple[str, ...]
    log_dir: str
    grace: int
    setup: tuple[str, ...]
    shared_dir: str
    environment: tuple[tuple[str, str], ...]
    # what a Secret gives on Kubernetes, which the environment sbatch runs in must give here: (variable, values key)
    from_submitter: tuple[tuple[str, str], ...]
    launcher: str
    launcher_check: tuple[str, str]  # a shell test that the launcher can start, and what to do when it cannot
    node_rank: str  # inside each task's shell (with replica groups, its rendezvous port too)
    torchrun_lines: tuple[str, ...]  # the other flags, a line per group
    program: str
    working_dir: str | None
    # the exit codes the script acts on (trainer_contract/exit_codes.py): "fail" ends the job unrequeued; a
    # "stop" (SIGTERM after the checkpoint) requeues without counting; any other failure counts
    stage_command: str | None  # the stager's, when the spec stages a model or dataset or restores a checkpoint
    # the training step's srun: without the variables only the stage step is given (a URI from a Secret on
    # Kubernetes, from the submitter's environment here), as the worker container is given none of them
    training_srun: str
    fail_codes: tuple[exit_codes.ExitCode, ...]
    stop_codes: tuple[exit_codes.ExitCode, ...]
    bad_config: int = exit_codes.BAD_CONFIG
    stalled: int = exit_codes.STALLED
    # with replica groups, the Lighthouse the script starts on the first node (its command)
    lighthouse: str | None = None
    lighthouse_port: int = replica_groups.LIGHTHOUSE_PORT
    # where the program's rank 0 notes each checkpoint it publishes, under OUTPUT_DIR: a step that published one
    # failed after progress, and its requeue is not counted (trainer_contract/gang_rounds.py)
    progress_path: str = gang_rounds.PROGRESS_PATH


def batch_script(spec: JobSpec, options: SlurmOptions) -> BatchScript:
    shared = options.shared_dir
    # DATA_DIR and OUTPUT_DIR default to the shared directory (expanded by the script's shell), as on
    # Kubernetes to the shared volume
    placement = {key: _shell_path(path) for key, path in spec.placement(_SHARED).items()}
    quoted = {key: shlex.quote(str(value)) for key, value in spec.environment.items()}
    environment = sorted({**placement, **quoted}.items())
    environment += [(variable.name, shlex.quote(variable.value or "")) for variable in spec.env]
    sbatch = [f"--{name}={value}" for name, value in
              (("partition", options.partition), ("account", options.account), ("qos", options.qos)) if value]
    # the GPU model: a node feature on Slurm, as a node label on Kubernetes (sbatch refuses a feature the
    # cluster does not define, at once and by name)
    if spec.gpu.accelerator is not None and spec.gpus:
        sbatch.append(f"--constraint={spec.gpu.accelerator}")
    flags = spec.torchrun_flags(node_rank=NODE_RANK, master_addr=MASTER_ADDR)
    if spec.replica_groups:  # each node a gang of its own, on a port of its own (test clusters share a host)
        flags = tuple(TorchrunFlag(flag.name, f'"$(({flag.value} + SLURM_NODEID))"', "node")
                      if flag.name == "--master-port" else flag for flag in flags)
    return BatchScript(
        cpus=math.ceil(spec.cpu_cores),
        memory_mib=math.ceil(spec.memory_gib * 1024),
        time_limit=options.time_limit,
        options=tuple(sbatch) + options.extra_options,
        log_dir=f"{shared}/logs" if shared else "logs",
        grace=spec.grace_seconds,
        setup=options.setup,
        shared_dir=shlex.quote(shared) if shared else '"$SLURM_SUBMIT_DIR"',
        environment=tuple(environment),
        from_submitter=_from_submitter(spec),
        launcher=LAUNCHERS[spec.launcher],
        launcher_check=LAUNCHER_CHECKS[spec.launcher],
        node_rank=" ".join(flag.text for flag in flags if flag.group == "node"),
        lighthouse=shlex.join(replica_groups.lighthouse_command(spec.min_replicas))
        if spec.min_replicas is not None else None,
        torchrun_lines=tuple(" ".join(flag.text for flag in group)
                             for name, group in groupby(flags, key=lambda flag: flag.group) if name != "node"),
        program=shlex.join(spec.program),
        working_dir=shlex.quote(spec.working_dir) if spec.working_dir is not None else None,
        stage_command=shlex.join(launcher.stage_command(spec.restores_for)) if spec.runs_stager else None,
        training_srun=shlex.join(["env", *(f"--unset={variable}" for variable in spec.secret_uris), "srun"])
        if spec.secret_uris else "srun",
        # a replica group in a crash loop (80) ends its node's task, not the job: srun returns once every group has
        # ended, and the requeue's counted failures bound it (the next allocation finds the run finished, or resumes)
        fail_codes=tuple(code for code in exit_codes.taking("fail")
                         if not (spec.replica_groups and code.code == exit_codes.RESTARTS_EXHAUSTED)),
        # a replica group that left on SIGTERM (scancel, a preemption) stopped as a gang's worker does: requeued
        stop_codes=exit_codes.taking("stop") + tuple(
            code for code in exit_codes.taking("leave") if code.code == exit_codes.GROUP_LEFT and spec.replica_groups),
    )


def _shell_path(path: str) -> str:
    """A placed path as one shell word: the shared directory expanded from the script's variable, every other
    character (a path storage URI's included) quoted as data."""
    if not path.startswith(_SHARED):
        return shlex.quote(path)
    rest = path[len(_SHARED):]
    if _INERT.fullmatch(rest):  # nothing in it that double quotes leave to the shell
        return f'"$shared_dir{rest}"'
    return '"$shared_dir"' + shlex.quote(rest)


def _from_submitter(spec: JobSpec) -> tuple[tuple[str, str], ...]:
    """The variables a Kubernetes render takes from Secrets' keys (checkpoint.signing_secret, storage_uri_secret),
    each with the values key that asks for it."""
    signing = ((storage.SIGNING_KEY_VARIABLE, "checkpoint.signing_secret"),) if spec.checkpoint_signing else ()
    return signing + tuple((storage.URI_VARIABLES[role], ".".join(SECRET_STORAGE_KEYS[role]))
                           for role, uri in spec.storage.items() if uri.scheme == "secret")


class SlurmTarget(Target):
    name = "slurm"
    title = "Slurm"

    def options(self, values: Mapping[str, Any]) -> SlurmOptions:
        return slurm_options(values)

    def warnings(self, values: Mapping[str, Any], spec: JobSpec) -> Iterable[str]:
        """GPUs asked for with the default CPUs and memory: sbatch would get --cpus-per-task and --mem sized for
        the CPU smoke test, which a GPU node's data loading and model rarely fit."""
        from generator.resources import default_values

        defaults, resources = default_values()["resources"], values.get("resources") or {}
        left = [key for key in ("cpu", "memory") if resources.get(key) == defaults[key]]
        if spec.gpus and left:
            yield (f"{' and '.join('resources.' + key for key in left)} left at the default "
                   f"(--cpus-per-task={math.ceil(spec.cpu_cores)} --mem={math.ceil(spec.memory_gib * 1024)}M per node) "
                   f"while each node asks for {spec.gpus} GPU(s): set them for your nodes")

    def option_problems(self, spec: JobSpec) -> Iterable[str]:
        return option_problems(spec, self.own(spec))

    def problems(self, spec: JobSpec) -> Iterable[str]:
        return slurm_problems(spec)

    def render(self, spec: JobSpec) -> list[Manifest]:
        context = {"spec": spec, "s": batch_script(spec, self.own(spec))}
        return [Manifest("BatchScript", "job.sbatch", render_template(environment(), "slurm/job.sbatch.j2", context))]


register(SlurmTarget())
