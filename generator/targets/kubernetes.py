"""The Kubernetes target: a JobSpec rendered as four manifests (templates/kubernetes/), a pure, deterministic
function of it.

What every target means comes from the spec (generator/spec.py); this module owns Kubernetes' own keys of the
values (``KubernetesOptions``: namespace, image, labels, scheduling, the shared volume, security), their
checks, and the names, labels, quantities and policies the templates need (``JobObjects``); every user value
passes through ``to_yaml``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

import yaml

from generator import __version__
from generator.errors import TemplateError
from generator.spec import EnvVar, ExtraVolume, JobSpec
from generator.targets import Target, register
from generator.targets import network_policy as netpol
from generator.targets import placement as placing
from generator.targets.labels import LABEL_NAME, label_key_problem, label_problems
from generator.templating import Manifest, environment, render_template
from generator.values import FastSafeLoader, describe_value
from trainer_contract import exit_codes, gang_rounds, launcher, metrics, names, replica_groups, storage
from trainer_contract.checkpoint_layout import CHECKPOINT_DIR_VARIABLE
from trainer_contract.program_settings import OUTPUT_VARIABLE
from trainer_contract.quantities import cpu_quantity, gib_quantity, parse_quantity

# The labels the Service selects the Job's pods by (values may not override them).
SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
# Oldest Kubernetes release where every Job field rendered here is GA (podReplacementPolicy: 1.34).
MIN_KUBERNETES = "1.34"

# The pod's own volumes and where they are mounted: extra_volumes may not take their names or paths.
OWN_VOLUMES = {"shared": launcher.SHARED_MOUNT, "dshm": "/dev/shm", "tmp": "/tmp"}
# The rank of a pod's node: the Indexed Job's completion index, which the kubelet expands in the args.
NODE_RANK = "$(JOB_COMPLETION_INDEX)"

# Apply order, which the file names' numbers give (kubectl apply -f DIR reads them sorted): the NetworkPolicy
# first, so that no pod of the job runs without it (numbered 0 so the others keep their names); the claim and
# the ConfigMap before pods reference them, the Service before pod 0's name must resolve.
# With replica groups, the Lighthouse (its policy, Deployment and Service) is applied before the Job: a group that
# starts first finds it.
_TEMPLATES = (
    (0, "NetworkPolicy", "kubernetes/networkpolicy.yaml.j2"),
    (0, "NetworkPolicy", "kubernetes/lighthouse-networkpolicy.yaml.j2"),
    (1, "PersistentVolumeClaim", "kubernetes/persistentvolumeclaim.yaml.j2"),
    (2, "ConfigMap", "kubernetes/configmap.yaml.j2"),
    (3, "Service", "kubernetes/service.yaml.j2"),
    (3, "PodMonitor", "kubernetes/podmonitor.yaml.j2"),
    (3, "Service", "kubernetes/lighthouse-service.yaml.j2"),
    (3, "Deployment", "kubernetes/lighthouse-deployment.yaml.j2"),
    (4, "Job", "kubernetes/stage-job.yaml.j2"),
    (4, "Job", "kubernetes/job.yaml.j2"),
)
# Argo CD's sync waves where the stage step is a Job of its own (initializer.separate_job): the stage Job once the
# claim and the ConfigMap are there (wave 0, the default), the training Job once the stage Job is healthy (complete)
SYNC_WAVE = "argocd.argoproj.io/sync-wave"
STAGE_JOB_WAVE, TRAINING_JOB_WAVE = "1", "2"

AccessMode = Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]


@dataclass(frozen=True)
class SharedVolume:
    size_gib: float
    storage_class: str | None
    access_mode: AccessMode
    existing_claim: str | None


@dataclass(frozen=True)
class Security:
    run_as_user: int
    run_as_group: int
    fs_group: int


@dataclass(frozen=True)
class Toleration:
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def manifest(self) -> dict[str, Any]:
        """As the pod spec spells it, with the fields set only."""
        fields = {"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect,
                  "tolerationSeconds": self.toleration_seconds}
        return {name: value for name, value in fields.items() if value is not None}


@dataclass(frozen=True)
class KubernetesOptions:
    """The values' keys that mean something on Kubernetes only (x-targets in the schema)."""

    namespace: str
    image: str
    image_pull_policy: PullPolicy
    image_pull_secrets: tuple[str, ...]
    accelerator_label: str
    resource_name: str
    extra_resources: Mapping[str, str | int]
    shared_volume: SharedVolume
    shm_gib: float
    ttl_seconds_after_finished: int | None
    active_deadline_seconds: int | None
    queue_name: str | None
    priority_class_name: str | None
    service_account_name: str | None
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    security: Security
    storage_secret: str | None = None  # only the containers that reach storage get it
    network_policy: netpol.NetworkPolicyOptions = netpol.NetworkPolicyOptions()
    placement: placing.PlacementOptions = placing.PlacementOptions()
    pod_labels: Mapping[str, str] = field(default_factory=dict)  # the training pods' only
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    workload_priority_class: str | None = None  # Kueue's, on the Job
    ephemeral_storage_gib: float | None = None
    cpu_limit: bool = True
    pod_monitor: bool = False
    separate_stage_job: bool = False  # initializer.separate_job


def kubernetes_options(values: Mapping[str, Any]) -> KubernetesOptions:
    gpu, volume = values["resources"]["gpu"], values["shared_volume"]
    tolerations = tuple(Toleration(item.get("key"), item.get("operator"), item.get("value"), item.get("effect"),
                                   item.get("tolerationSeconds")) for item in values["tolerations"])
    return KubernetesOptions(
        namespace=values["namespace"], image=values["image"], image_pull_policy=values["image_pull_policy"],
        image_pull_secrets=tuple(values["image_pull_secrets"]), accelerator_label=gpu["accelerator_label"],
        resource_name=gpu["resource_name"], extra_resources=dict(values["resources"].get("extra") or {}),
        shared_volume=SharedVolume(volume["size"], volume["storage_class"], volume["access_mode"],
                                   volume["existing_claim"]),
        shm_gib=values["shm_size"], ttl_seconds_after_finished=values["ttl_seconds_after_finished"],
        active_deadline_seconds=values["active_deadline_seconds"], queue_name=values["queue_name"],
        priority_class_name=values["priority_class_name"], service_account_name=values["service_account_name"],
        node_selector=dict(values["node_selector"]), tolerations=tolerations, labels=dict(values["labels"]),
        annotations=dict(values["annotations"]), security=Security(**values["security"]),
        storage_secret=values["storage_secret"], network_policy=netpol.network_policy_options(values),
        placement=placing.placement_options(values), pod_labels=dict(values["pod_labels"]),
        pod_annotations=dict(values["pod_annotations"]), workload_priority_class=values["workload_priority_class"],
        ephemeral_storage_gib=values["resources"].get("ephemeral_storage"),
        cpu_limit=values["resources"].get("cpu_limit", True), pod_monitor=values["metrics"]["pod_monitor"],
        separate_stage_job=values["initializer"].get("separate_job", False),
    )


def option_problems(spec: JobSpec, options: KubernetesOptions) -> Iterable[str]:
    """What Kubernetes would refuse in the values it alone uses (labels, selectors, tolerations, volumes,
    quantities), each naming its key."""
    yield from _metadata_problems(options)
    if label_key_problem(options.accelerator_label):
        yield f"resources.gpu.accelerator_label: invalid label key: {label_key_problem(options.accelerator_label)}"
    if spec.gpu.accelerator is not None and not LABEL_NAME.match(spec.gpu.accelerator):
        yield (
            f"resources.gpu.accelerator: {describe_value(spec.gpu.accelerator)} is not a valid node label value: "
            "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
        )
    if options.queue_name is not None and not LABEL_NAME.match(options.queue_name):
        yield (
            f"queue_name: {describe_value(options.queue_name)} is not a valid label value: letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    yield from _extra_resource_problems(options)
    yield from _toleration_problems(options.tolerations)
    yield from _stage_job_problems(spec, options)
    yield from _volume_problems(spec.extra_volumes)
    yield from _size_problems(spec, options)
    yield from netpol.option_problems(spec, options.network_policy)
    yield from placing.problems(options.placement, options.queue_name)
    yield from _queue_problems(spec, options)


def _metadata_problems(options: KubernetesOptions) -> Iterable[str]:
    yield from label_problems(options.labels, "labels", check_values=True)
    yield from label_problems(options.pod_labels, "pod_labels", check_values=True)
    yield from label_problems(options.node_selector, "node_selector", check_values=True)
    yield from label_problems(options.annotations, "annotations", check_values=False)
    yield from label_problems(options.pod_annotations, "pod_annotations", check_values=False)
    for where, labels in (("labels", options.labels), ("pod_labels", options.pod_labels)):
        for key in SELECTOR_LABELS:
            if key in labels:
                # the Service selects the pods by these: overriding one would detach the Service from the Job
                yield f"{where}.{key}: set by gen-manifests to select the Job's pods; remove it"


def _queue_problems(spec: JobSpec, options: KubernetesOptions) -> Iterable[str]:
    """Kueue's keys without a queue to read them, and a PodMonitor with nothing to scrape."""
    if options.workload_priority_class is not None and options.queue_name is None:
        yield ("workload_priority_class: a WorkloadPriorityClass is Kueue's: set queue_name too (or use "
               "priority_class_name for the pods' own PriorityClass)")
    if options.pod_monitor and spec.metrics_port is None:
        yield ("metrics.pod_monitor: the pods serve no metrics: set metrics.enabled to true (null turns them on for "
               "the built-in programs only)")


# What a run writes and must keep past its pod, for the other pods to read too (the placement's variables): in a pod
# only the shared volume and a writable extra volume hold it; the root is read-only, and /tmp and /dev/shm are each
# pod's own, gone with it. (Kubernetes only: on Slurm any path of the nodes' shared filesystem will do.)
KEPT_DIRECTORIES = (OUTPUT_VARIABLE, storage.EXPORT_VARIABLE, CHECKPOINT_DIR_VARIABLE)


def kept_directory_problems(spec: JobSpec) -> Iterable[str]:
    """config_map (or env) naming a kept directory outside the volumes the pod writes to."""
    writable = [launcher.SHARED_MOUNT, *(v.mount_path for v in spec.extra_volumes if not v.read_only)]
    given = {**{(f"config_map.{k}", k): v for k, v in spec.environment.items()},
             **{(f"env.{e.name}", e.name): e.value for e in spec.env if e.value is not None}}
    for (key, variable), path in sorted(given.items()):
        if variable not in KEPT_DIRECTORIES or not path.startswith("/"):
            continue
        place = posixpath.normpath(path)
        if any(place == mount or place.startswith(mount.rstrip("/") + "/") for mount in writable):
            continue
        pods_own = any(place == own or place.startswith(own + "/") for own in ("/tmp", "/dev/shm"))
        lost = (" (each pod's own, lost with it and unseen by the other pods)" if pods_own
                else " (the container's root is read-only)")
        yield (f"{key}: {path} is outside the volumes a pod writes to{lost}: put it under the shared volume "
               f"{launcher.SHARED_MOUNT}/ (remove it for the default, {launcher.SHARED_MOUNT}/runs/{spec.name}), or "
               "under the mount_path of one of extra_volumes")


def _extra_resource_problems(options: KubernetesOptions) -> Iterable[str]:
    """resources.extra as the API server takes a container's resources: a qualified name (an extended resource's with
    a domain, or hugepages-<size>), a whole number (hugepages: a quantity); not what the values' own keys say."""
    own = {"cpu": "resources.cpu", "memory": "resources.memory", "ephemeral-storage": "resources.ephemeral_storage",
           options.resource_name: "resources.gpu.accelerator_count"}
    for name, amount in sorted(options.extra_resources.items()):
        where = f"resources.extra.{name}"
        if name in own:
            yield f"{where}: set {own[name]} instead"
        elif label_key_problem(name) or ("/" not in name and not name.startswith("hugepages-")):
            yield (f"{where}: not a resource name: an extended resource has a domain prefix (rdma/ib, "
                   "example.com/device), or hugepages-<size>")
        elif name.startswith("hugepages-"):
            try:
                positive = parse_quantity(amount) > 0
            except ValueError:
                positive = False
            if not positive:
                yield f"{where}: {describe_value(amount)} is not a positive quantity (e.g. 1Gi)"
        elif not (isinstance(amount, int) or str(amount).isdigit()) or int(amount) < 1:
            yield f"{where}: {describe_value(amount)}: an extended resource is asked for in whole units (e.g. 1)"


def _toleration_problems(tolerations: tuple[Toleration, ...]) -> Iterable[str]:
    for index, toleration in enumerate(tolerations):
        if toleration.operator == "Exists" and toleration.value:
            yield f"tolerations[{index}].value: must be empty when operator is Exists"
        if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
            yield f"tolerations[{index}].tolerationSeconds: only applies with effect NoExecute"
        if not toleration.key and (toleration.operator or "Equal") != "Exists":
            yield f"tolerations[{index}].key: an empty key requires operator Exists"


def _volume_problems(extra_volumes: tuple[ExtraVolume, ...]) -> Iterable[str]:
    taken = dict(OWN_VOLUMES)
    for index, volume in enumerate(extra_volumes):
        where = f"extra_volumes[{index}]"
        if len(volume.sources) != 1:
            yield f"{where}: needs exactly one of secret, config_map, claim and empty_dir (hostPath is not allowed)"
        name, path = volume.name, volume.mount_path.rstrip("/") or "/"
        if name in taken:
            yield f"{where}.name: {name} is already a volume of the pod; choose another name"
        for other, other_path in taken.items():
            if path == other_path or path.startswith(other_path + "/") or other_path.startswith(path + "/") \
                    or path == "/":
                yield f"{where}.mount_path: {path} overlaps {other_path}, where volume {other} is mounted"
                break
        taken[name] = path


def _size_problems(spec: JobSpec, options: KubernetesOptions) -> Iterable[str]:
    """Quantities Kubernetes cannot keep, and a shared volume the pods cannot share."""
    if options.shm_gib >= spec.memory_gib:
        yield (f"shm_size: {options.shm_gib} GiB of /dev/shm counts against the pod's memory and must be less "
               f"than resources.memory ({spec.memory_gib} GiB)")
    volume = options.shared_volume
    for key_path, amount, unit in (
        ("resources.cpu", spec.cpu_cores, 1000),
        ("resources.memory", spec.memory_gib, 1024),
        ("shm_size", options.shm_gib, 1024),
        ("shared_volume.size", volume.size_gib, 1024),
        ("resources.ephemeral_storage", options.ephemeral_storage_gib or 1, 1024),
    ):
        if round(amount * unit) < 1:
            smallest = "0.001 (one millicore)" if unit == 1000 else "1/1024 (one MiB)"
            yield f"{key_path}: {amount} is below the smallest unit Kubernetes keeps, {smallest}"
    if volume.existing_claim is None and spec.replicas > 1 and volume.access_mode != "ReadWriteMany":
        yield (f"shared_volume.access_mode: {spec.replicas} pods share one new volume, which needs ReadWriteMany, "
               f"not {volume.access_mode}; set ReadWriteMany (and a storage_class that provides it) or "
               "use replicas: 1")
    if volume.existing_claim is not None and volume.storage_class is not None:
        yield ("shared_volume.storage_class: only applies to a new claim, but shared_volume.existing_claim is set; "
               "set one of them to null")


def credential_problems(spec: JobSpec, options: KubernetesOptions) -> Iterable[str]:
    """A bucket needs credentials, and on Kubernetes they come from a Secret (or a service account's role)."""
    buckets = [(key, uri) for key, uri in spec.reached() if uri.scheme == "s3"]
    from_secret = {variable.name for variable in spec.env if variable.value_from is not None}
    if buckets and not (spec.env_from_secrets or options.storage_secret or "AWS_ACCESS_KEY_ID" in from_secret
                        or options.service_account_name is not None):
        where, uri = buckets[0]
        yield (f"{where}: {uri.text} needs credentials, and none come from a Secret: add the "
               "Secret holding AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY as storage_secret (or env valueFrom "
               "for each), or set service_account_name to a service account with a role")


@dataclass(frozen=True)
class Lighthouse:
    """The replica groups' Lighthouse (torchft's): a Deployment of one pod beside the Job and its Service."""

    name: str
    labels: Mapping[str, str]
    selector_labels: Mapping[str, str]
    command: tuple[str, ...]
    port: int = replica_groups.LIGHTHOUSE_PORT
    cpu: str = "500m"  # a heartbeat from every group 10 times a second, and a quorum per step
    memory: str = "256Mi"

    @property
    def address(self) -> str:
        return f"http://{self.name}:{self.port}"


def _lighthouse(spec: JobSpec, labels: Mapping[str, Mapping[str, str]]) -> Lighthouse | None:
    if spec.min_replicas is None:
        return None
    return Lighthouse(names.lighthouse_name(spec.name), labels["lighthouse"],
                      {key: labels["lighthouse"][key] for key in SELECTOR_LABELS},
                      tuple(replica_groups.lighthouse_command(spec.min_replicas)))


def _worker_env(spec: JobSpec) -> tuple[dict[str, Any], ...]:
    """The worker container's own variables: the Job's uid, under which the launchers count the rounds they restart
    in place (gang_rounds), and the node it runs on, named where a node that keeps failing leaves the gang; with
    replica groups, the group's index and the name the other groups reach its pod by."""
    own: tuple[dict[str, Any], ...] = (
        {"name": gang_rounds.JOB_UID_VARIABLE, "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": f"metadata.labels['{names.JOB_UID_LABEL}']"}}},
        {"name": gang_rounds.NODE_NAME_VARIABLE, "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": "spec.nodeName"}}})
    if spec.min_replicas is None:
        return own
    return own + ({"name": replica_groups.GROUP, "value": NODE_RANK},
                  {"name": replica_groups.HOST, "value": names.pod_address(spec.name, NODE_RANK, spec.name)})


@dataclass(frozen=True)
class StageJob:
    """The Job that stages before the training Job (initializer.separate_job): its name and annotations, and the
    variable that has every training pod's stage step wait for it."""

    name: str
    annotations: Mapping[str, str]
    waits: tuple[dict[str, Any], ...]
    fails_job: int = exit_codes.BAD_CONFIG  # a source that cannot work; DATA_UNAVAILABLE (69) is tried again


@dataclass(frozen=True)
class JobObjects:
    """What the Kubernetes templates need beside the spec: its options and the spec in Kubernetes' terms."""

    options: KubernetesOptions
    labels: Mapping[str, Mapping[str, str]]  # by component (storage, config, rendezvous, network, worker), the Job's,
    # the training pods' (pod_labels beside labels)
    selector_labels: Mapping[str, str]
    node_selector: Mapping[str, str]
    service_name: str
    master_addr: str
    config: Mapping[str, str]  # the ConfigMap's data
    config_map_name: str
    claim_name: str
    create_claim: bool
    backoff_limit: int
    cpu: str
    memory: str
    shm: str
    storage: str
    ephemeral: str | None  # resources.ephemeral_storage: the container's, and each disk emptyDir's bound
    pod_annotations: Mapping[str, str]  # annotations and pod_annotations, the scrape's with metrics, Kueue's topology
    job_annotations: Mapping[str, str]  # the values' annotations, and Kueue's elastic-job for a Job that may scale
    env: tuple[dict[str, Any], ...]
    stage_env: tuple[dict[str, Any], ...]  # the stage step's alone: URIs from a Secret (storage_uri_secret)
    worker_env: tuple[dict[str, Any], ...]  # the worker container's alone
    stage_secrets: tuple[str, ...]  # Secrets (envFrom) of the stage step alone: the storage credentials
    worker_secrets: tuple[str, ...]  # the worker's alone: the same, where it mirrors or uploads the export
    tolerations: tuple[dict[str, Any], ...]
    topology_spread: tuple[dict[str, Any], ...]
    extra_volumes: tuple[dict[str, Any], ...]
    torchrun_flags: tuple[launcher.TorchrunFlag, ...]
    check_config_command: tuple[str, ...]  # a built-in program's (empty for the user's)
    stage_command: tuple[str, ...]  # the stager's (rendered when the spec runs it)
    # The worker's exit codes, which its launcher makes the pod's (trainer_contract/exit_codes.py): those whose
    # action is "fail" fail the whole Job instead of retrying what cannot work; "free" ones (a victim) are not
    # counted (the peer's pod counts the cause); a "stop" (SIGTERM) is free where the pod was disrupted.
    exit_fail_job: tuple[int, ...]
    exit_ignored: tuple[int, ...]
    exit_fail_index: tuple[int, ...] = ()  # with replica groups: a group's end, not the Job's
    network_policy: netpol.NetworkPolicyOptions | None = None  # rendered when enabled
    lighthouse: Lighthouse | None = None  # with replica groups
    stage_job: StageJob | None = None  # initializer.separate_job
    max_failed_indexes: int = 0  # with replica groups, the groups above min_replicas
    job_backoff_limit: int = 0  # the Job-wide backoffLimit: backoff_limit, or with replica groups every group's
    shared_mount: str = launcher.SHARED_MOUNT
    metrics_port_name: str = metrics.PORT_NAME
    metrics_path: str = metrics.PATH
    worker_container: str = names.WORKER_CONTAINER
    launcher_command: tuple[str, ...] = launcher.LAUNCHER_COMMAND


def _labels(spec: JobSpec, options: KubernetesOptions) -> dict[str, dict[str, str]]:
    """Every object's labels by component, the values' under gen-manifests' own; the training pods' with pod_labels
    between them."""
    own = {
        "app.kubernetes.io/name": "indexed-trainer",
        "app.kubernetes.io/instance": spec.name,
        "app.kubernetes.io/managed-by": "gen-manifests",
        "app.kubernetes.io/version": __version__,
    }
    labels = {
        component: {**options.labels, **own, "app.kubernetes.io/component": component}
        for component in ("storage", "config", "rendezvous", "network", "worker", "lighthouse", "metrics")
    }
    labels["pod"] = {**options.labels, **options.pod_labels, **own, "app.kubernetes.io/component": "worker"}
    kueue = {names.KUEUE_QUEUE_LABEL: options.queue_name, names.KUEUE_PRIORITY_LABEL: options.workload_priority_class}
    labels["job"] = {**labels["worker"], **{key: value for key, value in kueue.items() if value is not None}}
    return labels


def job_objects(spec: JobSpec, options: KubernetesOptions) -> JobObjects:
    """The spec in Kubernetes' terms: names, labels, quantities, the pod's env, volumes and command line."""
    labels = _labels(spec, options)
    selector = dict(options.node_selector)
    if spec.gpu.accelerator is not None:
        selector[options.accelerator_label] = spec.gpu.accelerator
    # data and results on the shared volume by default; config_map may override them
    lighthouse = _lighthouse(spec, labels)
    reached = {replica_groups.LIGHTHOUSE: lighthouse.address} if lighthouse is not None else {}
    config = dict(sorted({**spec.placement(launcher.SHARED_MOUNT), **reached, **spec.environment}.items()))
    master_addr = names.rendezvous_address(spec.name, spec.name)
    volume = options.shared_volume
    return JobObjects(
        options=options,
        labels=labels,
        selector_labels={key: labels["worker"][key] for key in SELECTOR_LABELS},
        node_selector=selector,
        service_name=spec.name,
        master_addr=master_addr,
        config=config,
        config_map_name=names.config_map_name(spec.name, config),
        claim_name=volume.existing_claim or names.claim_name(spec.name),
        create_claim=volume.existing_claim is None,
        **_failure_budgets(spec),
        lighthouse=lighthouse,
        stage_job=_stage_job(spec, options),
        cpu=cpu_quantity(spec.cpu_cores),
        memory=gib_quantity(spec.memory_gib),
        shm=gib_quantity(options.shm_gib),
        storage=gib_quantity(volume.size_gib),
        ephemeral=gib_quantity(options.ephemeral_storage_gib) if options.ephemeral_storage_gib else None,
        pod_annotations=_pod_annotations(spec, options),
        job_annotations=_job_annotations(spec, options),
        env=tuple(_env_var(variable) for variable in spec.env) + (
            (_env_var(EnvVar(storage.SIGNING_KEY_VARIABLE, value_from=spec.checkpoint_signing)),)
            if spec.checkpoint_signing is not None else ()),
        stage_env=tuple(_env_var(EnvVar(name, value_from=ref)) for name, ref in spec.secret_uris.items()),
        worker_env=_worker_env(spec),
        stage_secrets=(options.storage_secret,) if options.storage_secret else (),
        worker_secrets=(options.storage_secret,) if options.storage_secret and uploads(spec) else (),
        tolerations=tuple(toleration.manifest() for toleration in options.tolerations),
        topology_spread=placing.topology_spread(options.placement,
                                                {key: labels["worker"][key] for key in SELECTOR_LABELS}),
        extra_volumes=tuple(_extra_volume(volume, options.ephemeral_storage_gib) for volume in spec.extra_volumes),
        torchrun_flags=spec.torchrun_flags(node_rank=NODE_RANK, master_addr=master_addr),
        **_exit_policies(lighthouse is not None),
        check_config_command=launcher.check_config_command(spec.program[1]) if spec.built_in_worker else (),
        stage_command=launcher.stage_command(spec.restores_for),
        network_policy=options.network_policy if options.network_policy.enabled else None,
    )


class ExitPolicies(TypedDict):
    exit_fail_job: tuple[int, ...]
    exit_fail_index: tuple[int, ...]
    exit_ignored: tuple[int, ...]


def _exit_policies(replica_groups: bool) -> ExitPolicies:
    """The worker's exit codes by what the podFailurePolicy does with them; with replica groups a group's crash loop
    (80) fails its index, not the Job."""
    return {"exit_fail_job": tuple(code for code in exit_codes.codes_taking("fail")
                                   if not replica_groups or code != exit_codes.RESTARTS_EXHAUSTED),
            "exit_fail_index": (exit_codes.RESTARTS_EXHAUSTED,) if replica_groups else (),
            "exit_ignored": exit_codes.codes_taking("free", "leave")}


class FailureBudgets(TypedDict):
    backoff_limit: int  # backoffLimitPerIndex
    job_backoff_limit: int  # backoffLimit
    max_failed_indexes: int  # maxFailedIndexes


def _failure_budgets(spec: JobSpec) -> FailureBudgets:
    """The Job's limits on counted failures (see kubernetes/job.yaml.j2)."""
    if spec.min_replicas is None:
        # Only a root cause counts (a victim exits 75, ignored; a preemption is ignored), so a gang restart costs
        # one failure: max_restarts is both the Job-wide and the per-index limit, and no index may fail.
        return {"backoff_limit": spec.max_restarts, "job_backoff_limit": spec.max_restarts, "max_failed_indexes": 0}
    # replica groups: each group has its own budget (its index's), the Job's is theirs together (of every group it
    # may grow to), and the groups above min_replicas may fail
    return {"backoff_limit": spec.max_restarts, "job_backoff_limit": spec.max_restarts * spec.most_replicas,
            "max_failed_indexes": replica_groups.scaled(spec.replicas, spec.min_replicas,
                                                        spec.most_replicas)["maxFailedIndexes"]}


def uploads(spec: JobSpec) -> bool:
    """Whether the worker container writes to storage: the checkpoint mirror (rank 0 of a built-in program, or
    the launcher for a program of its own) or the export's upload (the launcher)."""
    return bool({"checkpoint", "export"} & set(spec.storage))


# Kueue admits a queued Job's change of parallelism as a new workload slice (its ElasticJobsViaWorkloadSlices
# feature) only for a Job that says it may scale.
KUEUE_ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"


def _job_annotations(spec: JobSpec, options: KubernetesOptions) -> dict[str, str]:
    """The values' annotations; a queued Job of replica groups that may grow (fault_tolerance.max_replicas) also
    opts into Kueue's elastic jobs; after a stage Job of its own, Argo CD's wave after that Job's."""
    elastic = options.queue_name is not None and spec.most_replicas > spec.replicas
    waits = {SYNC_WAVE: TRAINING_JOB_WAVE} if _separate_stage(spec, options) else {}
    return {**options.annotations, **({KUEUE_ELASTIC_JOB: "true"} if elastic else {}), **waits}


def _stage_job_problems(spec: JobSpec, options: KubernetesOptions) -> Iterable[str]:
    """initializer.separate_job where there is nothing to stage, or where the stage Job's name would not fit."""
    if not options.separate_stage_job:
        return
    if not spec.runs_stager:
        yield ("initializer.separate_job: nothing is staged (no initializer.model, dataset or datasets storage_uri "
               "to fetch, no checkpoint.storage_uri to restore from): set it to false")
        return
    host = names.pod_hostname(names.stage_job_name(spec.name), 0)
    if len(host) > names.MAX_HOSTNAME:
        yield (f"name: {spec.name!r} has {len(spec.name)} characters; with initializer.separate_job it may have at "
               f"most {names.MAX_HOSTNAME - len(host) + len(spec.name)} (the stage Job's pod hostname "
               f"{names.pod_hostname(names.stage_job_name('<name>'), 0)} must fit in {names.MAX_HOSTNAME})")


def _separate_stage(spec: JobSpec, options: KubernetesOptions) -> bool:
    return options.separate_stage_job and spec.runs_stager


def _stage_job(spec: JobSpec, options: KubernetesOptions) -> StageJob | None:
    if not _separate_stage(spec, options):
        return None
    name = names.stage_job_name(spec.name)
    return StageJob(name, {**options.annotations, SYNC_WAVE: STAGE_JOB_WAVE},
                    (_env_var(EnvVar(storage.STAGE_JOB_VARIABLE, value=name)),))


def _pod_annotations(spec: JobSpec, options: KubernetesOptions) -> dict[str, str]:
    """The values' annotations, then pod_annotations; with metrics, Prometheus' scrape annotations first (the values'
    may override); Kueue's topology request last (queue_topology says it)."""
    scrape = {"prometheus.io/scrape": "true", "prometheus.io/port": str(spec.metrics_port),
              "prometheus.io/path": metrics.PATH} if spec.metrics_port is not None else {}
    return {**scrape, **options.annotations, **options.pod_annotations,
            **placing.topology_annotations(options.placement)}


def _env_var(variable: EnvVar) -> dict[str, Any]:
    """One of env as the container spells it."""
    if variable.value_from is None:
        return {"name": variable.name, "value": variable.value}
    ref = variable.value_from
    key_ref: dict[str, Any] = {"name": ref.name, "key": ref.key}
    if ref.optional is not None:
        key_ref["optional"] = ref.optional
    return {"name": variable.name, "valueFrom": {ref.kind: key_ref}}


def _extra_volume(volume: ExtraVolume, ephemeral_gib: float | None) -> dict[str, Any]:
    """One of extra_volumes as the pod's volume and the container's mount; an emptyDir of no size of its own is
    bounded by resources.ephemeral_storage."""
    source: dict[str, Any]
    if volume.secret is not None:
        source = {"secret": {"secretName": volume.secret}}
    elif volume.config_map is not None:
        source = {"configMap": {"name": volume.config_map}}
    elif volume.claim is not None:
        source = {"persistentVolumeClaim": {"claimName": volume.claim}}
    else:
        size = volume.empty_dir_size_gib or ephemeral_gib
        source = {"emptyDir": {"sizeLimit": gib_quantity(size)} if size else {}}
    mount: dict[str, Any] = {"name": volume.name, "mountPath": volume.mount_path}
    if volume.read_only or volume.secret is not None or volume.config_map is not None:
        mount["readOnly"] = True  # secrets and ConfigMaps are read-only anyway: say so
    return {"volume": {"name": volume.name, **source}, "mount": mount}


def render_manifests(spec: JobSpec, directory: Path | None = None, *, target: str = "kubernetes") -> list[Manifest]:
    """Render ``spec`` into manifests in apply order, with the options of ``target`` (this one, or one that
    renders Kubernetes' objects too). Same spec, same bytes."""
    env = environment(directory)
    context = {"spec": spec, "k": job_objects(spec, spec.options[target])}
    manifests = []
    for order, kind, template_name in _TEMPLATES:
        text = render_template(env, template_name, context)
        if not text.strip():
            continue  # a template may render nothing (no claim when an existing one is used)
        try:
            document = yaml.load(text, Loader=FastSafeLoader)
        except yaml.YAMLError as exc:
            raise TemplateError(f"templates/{template_name} rendered invalid YAML: {exc}") from None
        if not isinstance(document, dict) or document.get("kind") != kind:
            raise TemplateError(f"templates/{template_name} must render one {kind} object")
        # the Lighthouse's objects and the stage Job are named after them: another of the same kind has the plain name
        stem = template_name.rsplit("/", 1)[-1].split(".", 1)[0]
        owner = f"{stem.rsplit('-', 1)[0]}-" if "-" in stem else ""
        manifests.append(Manifest(kind, f"{order}-{owner}{kind.lower()}.yaml", text))
    return manifests


def to_stream(manifests: list[Manifest]) -> str:
    """One multi-document YAML stream, in apply order, for ``kubectl apply -f -``."""
    return "".join(f"---\n{manifest.text}" for manifest in manifests)


class KubernetesTarget(Target):
    name = "kubernetes"
    title = "Kubernetes"

    def options(self, values: Mapping[str, Any]) -> KubernetesOptions:
        return kubernetes_options(values)

    def option_problems(self, spec: JobSpec) -> Iterable[str]:
        return option_problems(spec, self.own(spec))

    def problems(self, spec: JobSpec) -> Iterable[str]:
        yield from credential_problems(spec, self.own(spec))
        yield from netpol.problems(spec, self.own(spec).network_policy)
        yield from kept_directory_problems(spec)

    def warnings(self, values: Mapping[str, Any], spec: JobSpec) -> Iterable[str]:
        return netpol.warnings(self.own(spec).network_policy)

    def render(self, spec: JobSpec) -> list[Manifest]:
        return render_manifests(spec, target=self.name)

    def stream(self, manifests: list[Manifest]) -> str:
        return to_stream(manifests)


register(KubernetesTarget())
