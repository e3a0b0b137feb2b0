"""The job as every target sees it: validated values become one typed, target-neutral ``JobSpec``, built once,
which each target (generator/targets/) renders with its own options and derived context. What every target
means by a value is decided here once; how a target spells it (quantities, #SBATCH options, paths) is the
target's. No template reads the values themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainer_contract import datasets as staged_datasets
from trainer_contract import gang_rounds, metrics, pod_environment, program_settings, replica_groups, warm_start
from trainer_contract.checkpoint_layout import CHECKPOINT_DIR_VARIABLE
from trainer_contract.config_reading import load_config
from trainer_contract.launcher import BUILT_IN_WORKER, TorchrunFlag, torchrun_flags
from trainer_contract.settings import ConfigError
from trainer_contract.storage import (
    EXPORT_VARIABLE,
    STAGED,
    URI_SOURCE_VARIABLES,
    URI_VARIABLES,
    Role,
    StorageUri,
    from_secret,
)
from trainer_contract.storage import parse as parse_storage_uri

Launcher = Literal["indexed-trainer", "torchrun"]
VolumeSource = Literal["secret", "config_map", "claim", "empty_dir"]
VOLUME_SOURCES: tuple[VolumeSource, ...] = ("secret", "config_map", "claim", "empty_dir")

# Where each storage role's URI is in the values.
STORAGE_KEYS: dict[Role, tuple[str, ...]] = {
    "model": ("initializer", "model", "storage_uri"),
    "dataset": ("initializer", "dataset", "storage_uri"),
    "export": ("export", "storage_uri"),
    "checkpoint": ("checkpoint", "storage_uri"),
}
# Where a staged role's URI may come from a Secret's key instead (a presigned URL).
SECRET_STORAGE_KEYS: dict[Role, tuple[str, ...]] = {
    "model": ("initializer", "model", "storage_uri_secret"),
    "dataset": ("initializer", "dataset", "storage_uri_secret"),
}

# What a multi-node GPU job needs for a dead peer to end the step in bounded time: the NCCL watchdog aborts
# a timed-out collective and tears the process down (async error handling), and the heartbeat monitor kills a
# process whose watchdog itself hangs. In the environment, so config_map and env override them.
NCCL_DEFAULTS = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "300",
}


def environment_text(value: str | int | float | bool) -> str:
    """A values file's variable as the process reads it: YAML's true/false as true/false (not Python's True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Gpu:
    count: int  # per pod or node
    accelerator: str | None  # the GPU model, where the nodes are labelled or featured with it
    cpu_fallback: bool  # too few GPUs seen: train on the CPU (true) or exit GPU_MISSING


@dataclass(frozen=True)
class KeyRef:
    """A key of a Secret or ConfigMap an env variable takes its value from."""

    kind: Literal["secretKeyRef", "configMapKeyRef"]
    name: str
    key: str
    optional: bool | None = None


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None = None
    value_from: KeyRef | None = None


@dataclass(frozen=True)
class ExtraVolume:
    """One of extra_volumes: exactly one of its sources is set (validation says so when not)."""

    name: str
    mount_path: str
    read_only: bool = False
    secret: str | None = None
    config_map: str | None = None
    claim: str | None = None
    empty_dir: bool = False
    empty_dir_size_gib: float | None = None

    @property
    def sources(self) -> list[VolumeSource]:
        """The sources set, in VOLUME_SOURCES' order."""
        given = {"secret": self.secret is not None, "config_map": self.config_map is not None,
                 "claim": self.claim is not None, "empty_dir": self.empty_dir}
        return [source for source in VOLUME_SOURCES if given[source]]


@dataclass(frozen=True)
class JobSpec:
    name: str
    replicas: int  # pods on Kubernetes, nodes on Slurm: torchrun's --nnodes
    procs_per_node: int  # torchrun's --nproc-per-node
    gpu: Gpu
    cpu_cores: float
    memory_gib: float
    master_port: int
    join_timeout_seconds: int
    max_restarts: int
    grace_seconds: int
    working_dir: str | None
    launcher: Launcher
    built_in_worker: bool  # the program is one of this project's (BUILT_IN_PROGRAMS): the MNIST worker or a workload
    program: tuple[str, ...]  # what torchrun runs: -m MODULE or SCRIPT, then the program's arguments
    environment: Mapping[str, str]  # every process's variables (config_map over the defaults shown), sorted
    env: tuple[EnvVar, ...] = ()  # values env: they override environment, and may come from Secrets
    env_from_secrets: tuple[str, ...] = ()
    extra_volumes: tuple[ExtraVolume, ...] = ()
    # the Secret key that signs the checkpoints' listings in the bucket (checkpoint.signing_secret)
    checkpoint_signing: KeyRef | None = None
    # where the model and dataset come from and exports and checkpoints go, for the roles set
    storage: Mapping[Role, StorageUri] = field(default_factory=dict)
    # initializer.datasets: several datasets by name, each staged into DATASET_DIR/<name> (instead of the dataset's)
    datasets: Mapping[str, StorageUri] = field(default_factory=dict)
    # the port each pod's local rank 0 serves its live metrics on (values metrics); None: no endpoint
    metrics_port: int | None = None
    # fault_tolerance.replica_groups: each pod (node) one replica group, the fewest that step; None: one gang
    min_replicas: int | None = None
    # fault_tolerance.max_replicas: the most groups the running Job may be scaled to (replicas when not set)
    max_replicas: int | None = None
    # each registered target's own options (generator/targets/), by target name
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.gpu.count

    @property
    def replica_groups(self) -> bool:
        """Each pod (node) is a replica group of its own gang (trainer_contract/replica_groups.py)."""
        return self.min_replicas is not None

    @property
    def most_replicas(self) -> int:
        """The most pods the Job may have: fault_tolerance.max_replicas for replica groups, else replicas."""
        return self.max_replicas or self.replicas if self.replica_groups else self.replicas

    @property
    def shutdown_timeout(self) -> int:
        """torchrun's wait between forwarding SIGTERM and killing the workers: inside the grace period, with a
        few seconds left for torchrun itself to exit."""
        return max(1, self.grace_seconds - 5)

    def program_config(self) -> Any | None:
        """A built-in program's settings as its processes will read them (config_map over its defaults), or None:
        a program of the user's, or settings it cannot read (the values' own check names them)."""
        config_class = program_settings.BUILT_IN_PROGRAMS.get(self.program[1]) if self.built_in_worker else None
        if config_class is None:
            return None
        try:
            return load_config(self.environment, config_class=config_class)
        except ConfigError:
            return None

    @property
    def staged(self) -> dict[Role, StorageUri]:
        """The sources staged onto the shared location before training (a path source is already there)."""
        return {role: uri for role, uri in self.storage.items()
                if role in STAGED and uri.scheme != "path"}

    @property
    def runs_stager(self) -> bool:
        """Whether the stager runs before training: to stage a source, or to restore a checkpoint from the bucket
        onto a volume that has none."""
        return bool(self.staged) or bool(self.datasets) or "checkpoint" in self.storage

    def reached(self) -> list[tuple[str, StorageUri]]:
        """Every source and destination with the values key that names it (a Secret's, for a URI it holds), the
        datasets' included: what the pods reach over the network, and what needs credentials."""
        named = [(".".join((SECRET_STORAGE_KEYS if uri.scheme == "secret" else STORAGE_KEYS)[role]), uri)
                 for role, uri in self.storage.items()]
        return named + [(f"initializer.datasets.{name}.storage_uri", uri) for name, uri in self.datasets.items()]

    @property
    def restores_for(self) -> str | None:
        """The built-in program whose checkpoints the stager restores from checkpoint.storage_uri (its module), or
        None (no bucket, or a program of the user's: the stager finds its directory in CHECKPOINT_DIR_VARIABLE)."""
        return self.program[1] if "checkpoint" in self.storage and self.built_in_worker else None

    @property
    def mirrors_own_checkpoints(self) -> bool:
        """A program of the user's with checkpoint.storage_uri: it writes its checkpoints into CHECKPOINT_DIR_VARIABLE's
        directory (trainer_contract/checkpoint_layout.py's convention), which node 0's launcher mirrors."""
        return "checkpoint" in self.storage and not self.built_in_worker

    @property
    def secret_uris(self) -> dict[str, KeyRef]:
        """The stager's URI variables that come from a Secret's key (storage_uri_secret), by variable: only the
        stage step is given them, and no render writes what they hold."""
        return {URI_VARIABLES[role]: KeyRef("secretKeyRef", uri.secret, uri.secret_key)
                for role, uri in self.storage.items() if uri.scheme == "secret"}

    def placement(self, shared: str) -> dict[str, str]:
        """Where data and results go by default, under the location every node shares, and where the model and
        dataset are staged (config_map overrides)."""
        staged = {STAGED[role].path: uri.staged_path(shared, role) for role, uri in self.storage.items()
                  if role in STAGED}
        if self.datasets:  # validation refuses them beside initializer.dataset
            staged[STAGED["dataset"].path] = staged_datasets.mixed_path(
                shared, {name: uri.text for name, uri in self.datasets.items()})
        # a staged dataset is the data (the built-in worker reads DATA_DIR/MNIST/raw/)
        data = staged.get(STAGED["dataset"].path, f"{shared}/data")
        output = f"{shared}/runs/{self.name}"
        export = {EXPORT_VARIABLE: f"{output}/export"} if "export" in self.storage else {}
        own = {CHECKPOINT_DIR_VARIABLE: f"{output}/checkpoints"} if self.mirrors_own_checkpoints else {}
        return {program_settings.DATA_VARIABLE: data, program_settings.OUTPUT_VARIABLE: output, **staged, **export, **own}

    def torchrun_flags(self, *, node_rank: str, master_addr: str) -> tuple[TorchrunFlag, ...]:
        """torchrun's command line for this job, the node's rank and the rendezvous address in the target's
        spelling. With replica groups each pod (node) is a gang of its own: node 0 of 1, its store on itself."""
        if self.replica_groups:
            node_rank, master_addr = "0", replica_groups.GROUP_STORE_ADDRESS
        return torchrun_flags(nnodes=1 if self.replica_groups else self.replicas, nproc_per_node=self.procs_per_node,
                              node_rank=node_rank, master_addr=master_addr, master_port=self.master_port,
                              join_timeout=self.join_timeout_seconds, shutdown_timeout=self.shutdown_timeout)


def entry_module(entry: Mapping[str, Any]) -> str | None:
    """The module the processes run: entrypoint.module, else the built-in worker unless a script is set."""
    if entry["module"] is not None:
        return entry["module"]
    return None if entry["script"] is not None else BUILT_IN_WORKER


def _key_ref(kind: Literal["secretKeyRef", "configMapKeyRef"], ref: Mapping[str, Any] | None) -> KeyRef | None:
    return None if ref is None else KeyRef(kind, ref["name"], ref["key"], ref.get("optional"))


def _env_var(item: Mapping[str, Any]) -> EnvVar:
    reference = None
    for kind, ref in item.get("valueFrom", {}).items():
        reference = _key_ref(kind, ref)
    return EnvVar(item["name"], item.get("value"), reference)


def _extra_volume(item: Mapping[str, Any]) -> ExtraVolume:
    empty_dir = item.get("empty_dir")
    return ExtraVolume(item["name"], item["mount_path"], bool(item.get("read_only", False)), item.get("secret"),
                       item.get("config_map"), item.get("claim"), empty_dir is not None,
                       (empty_dir or {}).get("size"))


def storage_uri_text(values: Mapping[str, Any], role: Role) -> str | None:
    return value_at(values, STORAGE_KEYS[role])


def value_at(values: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    """The value at ``keys`` (a path of mapping keys), None where any is missing."""
    node: Any = values
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _storage(values: Mapping[str, Any]) -> dict[Role, StorageUri]:
    found = {role: storage_uri_text(values, role) for role in STORAGE_KEYS}
    sources = {role: parse_storage_uri(text, role) for role, text in found.items() if text is not None}
    for role, keys in SECRET_STORAGE_KEYS.items():
        ref = value_at(values, keys)
        if ref is not None:  # validation refuses it beside storage_uri
            sources[role] = from_secret(ref["name"], ref["key"])
    return sources


def _hub_patterns(values: Mapping[str, Any]) -> dict[str, Any]:
    """The stager's allow and ignore patterns of each staged role, as JSON (null: not rendered)."""
    rendered: dict[str, Any] = {}
    for role in STAGED:
        for key in ("allow_patterns", "ignore_patterns"):  # the values' keys are the variables' fields
            patterns = values["initializer"][role].get(key)
            rendered[getattr(STAGED[role], key)] = None if patterns is None else json.dumps(patterns)
    return rendered


def _environment(values: Mapping[str, Any], sources: Mapping[Role, StorageUri], *, built_in: bool,
                 shown: Mapping[str, str], metrics_port: int | None) -> dict[str, str]:
    """Every process's variables: the GPU request, the stager's URIs, the launcher's in-place restarts, the metrics
    port, a built-in program's shown defaults, then config_map over them (a null removes one); sorted."""
    gpu = values["resources"]["gpu"]
    request = pod_environment.gpu_request(gpu["accelerator_count"], gpu["cpu_fallback"])
    # the stager reads the URIs (the program reads MODEL_DIR and DATASET_DIR: placement)
    uris = {URI_VARIABLES[role]: uri.text for role, uri in sources.items() if uri.scheme != "secret"}
    # a URI from a Secret is named by the Secret and key in every line, never by its text
    uris |= {URI_SOURCE_VARIABLES[role]: uri.describe for role, uri in sources.items() if uri.scheme == "secret"}
    uris |= {STAGED[role].unpack_limit: values["initializer"][role].get("max_unpacked_bytes")
             for role in STAGED}  # null: not rendered
    uris |= _hub_patterns(values)
    datasets = values["initializer"].get("datasets")
    if datasets:  # initializer.datasets: in one variable, beside DATASET_DIR (placement)
        uris[staged_datasets.DATASETS_VARIABLE] = staged_datasets.rendered(datasets)
    # a built-in program's launcher restarts failed rounds in place, within max_restarts (trainer_launcher/recovery.py)
    warm_after = values["warm_workers_after_seconds"]  # null: off (the launcher's default is on)
    in_place = {gang_rounds.RESTART_IN_PLACE_VARIABLE: values["restart_in_place"],
                gang_rounds.MAX_RESTARTS_VARIABLE: values["max_restarts"],
                gang_rounds.LEAVE_AFTER_VARIABLE: values["node_leaves_after_failures"],
                warm_start.WARM_AFTER_VARIABLE: warm_start.OFF if warm_after is None else warm_after,
                } if built_in else {}
    tolerance = values["fault_tolerance"]
    groups = {replica_groups.GROUPS: values["replicas"], replica_groups.MIN_REPLICAS: tolerance["min_replicas"],
              replica_groups.MAX_REPLICAS: tolerance["max_replicas"] or values["replicas"]} \
        if tolerance["replica_groups"] else {}
    network = pod_environment.NCCL_NETWORK_PRESETS.get(gpu["network"], {})
    nccl = {**NCCL_DEFAULTS, **network} if gpu["accelerator_count"] else {}
    environment = {**nccl, **request, **uris, **in_place, **groups,
                   metrics.PORT_VARIABLE: metrics_port, **shown, **values["config_map"]}
    return dict(sorted((key, environment_text(value)) for key, value in environment.items() if value is not None))


def build_spec(values: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> JobSpec:
    """The spec of schema-valid ``values``, with the targets' ``options`` (their own keys, typed)."""
    gpu = values["resources"]["gpu"]
    entry = values["entrypoint"]
    module = entry_module(entry)
    config_class = program_settings.BUILT_IN_PROGRAMS.get(module or "")
    built_in = config_class is not None
    # a built-in program's hyper-parameters are shown with their defaults; another program gets none of them
    shown = program_settings.shown_defaults(config_class) if config_class is not None else {}
    sources = _storage(values)
    enabled = values["metrics"]["enabled"]
    metrics_port = values["metrics"]["port"] if (built_in if enabled is None else enabled) else None
    environment = _environment(values, sources, built_in=built_in, shown=shown, metrics_port=metrics_port)
    return JobSpec(
        name=values["name"],
        replicas=values["replicas"],
        procs_per_node=values["local_device_count"] or gpu["accelerator_count"] or 1,
        gpu=Gpu(gpu["accelerator_count"], gpu["accelerator"], gpu["cpu_fallback"]),
        cpu_cores=values["resources"]["cpu"],
        memory_gib=values["resources"]["memory"],
        master_port=values["master_port"],
        join_timeout_seconds=values["join_timeout_seconds"],
        max_restarts=values["max_restarts"],
        grace_seconds=values["termination_grace_period_seconds"],
        working_dir=values["working_dir"],
        # the indexed-trainer launcher passes the worker's exit codes on, uploads an export and mirrors a program's
        # checkpoints; torchrun alone is the default for another program that needs none of them
        launcher=entry["launcher"] or ("indexed-trainer" if built_in or {"export", "checkpoint"} & set(sources)
                                       else "torchrun"),
        built_in_worker=built_in,
        program=tuple((["-m", module] if module is not None else [entry["script"]]) + entry["args"]),
        environment=environment,
        env=tuple(_env_var(item) for item in values["env"]),
        env_from_secrets=tuple(values["env_from_secrets"]),
        checkpoint_signing=_key_ref("secretKeyRef", values["checkpoint"].get("signing_secret")),
        extra_volumes=tuple(_extra_volume(item) for item in values["extra_volumes"]),
        storage=sources,
        datasets={name: parse_storage_uri(entry["storage_uri"], "dataset")
                  for name, entry in sorted((values["initializer"].get("datasets") or {}).items())},
        metrics_port=metrics_port,
        min_replicas=values["fault_tolerance"]["min_replicas"] if values["fault_tolerance"]["replica_groups"] else None,
        max_replicas=values["fault_tolerance"]["max_replicas"],
        options=dict(options or {}),
    )
