"""The Kubernetes target: validated values rendered as four manifests, a pure, deterministic function of them.

What both targets mean comes from the job's description (generator/job.py); this module adds Kubernetes' names,
labels, quantities and policies, and templates/kubernetes/ hold the manifests' shape; every user value passes
through ``to_yaml``. The Slurm target (slurm.py) stands beside it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import yaml

from generator import __version__
from generator.errors import TemplateError
from generator.job import describe
from generator.quantities import cpu_quantity, gib_quantity
from generator.templating import Manifest, environment, render_template
from generator.values import FastSafeLoader, describe_value
from trainer_contract import launcher, names

# The labels the Service selects the Job's pods by (values may not override them).
SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
# Oldest Kubernetes release where every Job field rendered here is GA (podReplacementPolicy: 1.34).
MIN_KUBERNETES = "1.34"

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The pod's own volumes and where they are mounted: extra_volumes may not take their names or paths.
OWN_VOLUMES = {"shared": launcher.SHARED_MOUNT, "dshm": "/dev/shm", "tmp": "/tmp"}

# Apply order: the claim and the ConfigMap must exist before pods reference them, the Service before
# pod 0's name must resolve.
_TEMPLATES = (
    ("PersistentVolumeClaim", "kubernetes/persistentvolumeclaim.yaml.j2"),
    ("ConfigMap", "kubernetes/configmap.yaml.j2"),
    ("Service", "kubernetes/service.yaml.j2"),
    ("Job", "kubernetes/job.yaml.j2"),
)


def _label_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "its prefix (before '/') must be a DNS-1123 subdomain of at most 253 characters"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return "its name must be 1-63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
    return None


def _label_problems(mapping: dict, key_path: str, *, check_values: bool) -> Iterable[str]:
    for key, value in sorted(mapping.items()):
        where = f"{key_path}.{key}"
        problem = _label_key_problem(key)
        if problem:
            yield f"{where}: invalid key: {problem}"
        if check_values and value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            yield f"{where}: {describe_value(value)} is not a valid label value: at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"


def value_problems(values: dict) -> Iterable[str]:
    """What Kubernetes would refuse in the values it alone uses (labels, selectors, tolerations, volumes), each
    naming its key; validation reports them with the rest, whatever the target."""
    gpu = values["resources"]["gpu"]
    yield from _label_problems(values["labels"], "labels", check_values=True)
    yield from _label_problems(values["node_selector"], "node_selector", check_values=True)
    yield from _label_problems(values["annotations"], "annotations", check_values=False)
    for key in SELECTOR_LABELS:
        if key in values["labels"]:
            # the Service selects the pods by these: overriding one would detach the Service from the Job
            yield f"labels.{key}: set by gen-manifests to select the Job's pods; remove it"
    label_key = gpu["accelerator_label"]
    if _label_key_problem(label_key):
        yield f"resources.gpu.accelerator_label: invalid label key: {_label_key_problem(label_key)}"
    if gpu["accelerator"] is not None and not _LABEL_NAME.match(gpu["accelerator"]):
        yield (
            f"resources.gpu.accelerator: {describe_value(gpu['accelerator'])} is not a valid node label value: "
            "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
        )
    if values["queue_name"] is not None and not _LABEL_NAME.match(values["queue_name"]):
        yield (
            f"queue_name: {describe_value(values['queue_name'])} is not a valid label value: letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    for index, toleration in enumerate(values["tolerations"]):
        if toleration.get("operator") == "Exists" and toleration.get("value"):
            yield f"tolerations[{index}].value: must be empty when operator is Exists"
        if "tolerationSeconds" in toleration and toleration.get("effect") != "NoExecute":
            yield f"tolerations[{index}].tolerationSeconds: only applies with effect NoExecute"
        if not toleration.get("key") and toleration.get("operator", "Equal") != "Exists":
            yield f"tolerations[{index}].key: an empty key requires operator Exists"
    yield from _volume_problems(values)


def _volume_problems(values: dict) -> Iterable[str]:
    names = dict(OWN_VOLUMES)
    for index, volume in enumerate(values["extra_volumes"]):
        where = f"extra_volumes[{index}]"
        sources = [key for key in ("secret", "config_map", "claim", "empty_dir") if key in volume]
        if len(sources) != 1:
            yield f"{where}: needs exactly one of secret, config_map, claim and empty_dir (hostPath is not allowed)"
        name, path = volume["name"], volume["mount_path"].rstrip("/") or "/"
        if name in names:
            yield f"{where}.name: {name} is already a volume of the pod; choose another name"
        for other, other_path in names.items():
            if path == other_path or path.startswith(other_path + "/") or other_path.startswith(path + "/") \
                    or path == "/":
                yield f"{where}.mount_path: {path} overlaps {other_path}, where volume {other} is mounted"
                break
        names[name] = path


def derive(values: dict) -> dict:
    """What the Kubernetes templates need: the job's description (generator/job.py) in Kubernetes' terms."""
    job = describe(values)
    name = values["name"]
    gpu = values["resources"]["gpu"]
    volume = values["shared_volume"]
    common_labels = {
        **values["labels"],
        "app.kubernetes.io/name": "indexed-trainer",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "gen-manifests",
        "app.kubernetes.io/version": __version__,
    }
    labels = {
        component: {**common_labels, "app.kubernetes.io/component": component}
        for component in ("storage", "config", "rendezvous", "worker")
    }
    # The Kueue queue label goes on the Job only: Kueue admits Jobs, not their pods.
    labels["job"] = dict(labels["worker"])
    if values["queue_name"] is not None:
        labels["job"]["kueue.x-k8s.io/queue-name"] = values["queue_name"]
    selector = dict(values["node_selector"])
    if gpu["accelerator"] is not None:
        selector[gpu["accelerator_label"]] = gpu["accelerator"]
    # data and results on the shared volume by default; config_map may override them
    config = {**job.placement(launcher.SHARED_MOUNT), **job.environment}
    return {
        "procs_per_pod": job.procs_per_node,
        "gpus": job.gpus,
        "master_addr": names.rendezvous_address(name, name),
        "service_name": name,
        "config_map_name": names.config_map_name(name, config),
        "claim_name": volume["existing_claim"] or names.claim_name(name),
        "create_claim": volume["existing_claim"] is None,
        # Only a root cause counts (a victim exits 75, ignored; a preemption is ignored), so a gang restart
        # costs one failure: max_restarts is both the Job-wide and the per-index limit (see kubernetes/job.yaml.j2).
        "backoff_limit": values["max_restarts"],
        "cpu": cpu_quantity(values["resources"]["cpu"]),
        "memory": gib_quantity(values["resources"]["memory"]),
        "shm": gib_quantity(values["shm_size"]),
        "storage": gib_quantity(volume["size"]),
        "labels": labels,
        "selector_labels": {key: labels["worker"][key] for key in SELECTOR_LABELS},
        "node_selector": selector,
        "config": dict(sorted(config.items())),
        # The worker's exit codes, which its launcher makes the pod's: bad configuration fails the whole Job
        # instead of retrying what cannot work; "a peer failed first" is not counted (the peer's pod counts the
        # cause); SIGTERM (preemption, a time limit) is a free restart.
        "exit_fail_job": list(job.exit_codes.fail_job),
        "exit_peer_lost": job.exit_codes.peer_lost,
        "shutdown_timeout": job.shutdown_timeout,
        "shared_mount": launcher.SHARED_MOUNT,
        "launcher_command": list(launcher.LAUNCHER_COMMAND),
        "check_config_command": list(launcher.CHECK_CONFIG_COMMAND),
        "built_in_worker": job.built_in_worker,
        "launcher": job.launcher,
        "program": list(job.program),
        "extra_volumes": [_extra_volume(volume) for volume in values["extra_volumes"]],
    }


def _extra_volume(volume: dict) -> dict:
    """One of extra_volumes as the pod's volume and the container's mount."""
    name = volume["name"]
    if "secret" in volume:
        source = {"secret": {"secretName": volume["secret"]}}
    elif "config_map" in volume:
        source = {"configMap": {"name": volume["config_map"]}}
    elif "claim" in volume:
        source = {"persistentVolumeClaim": {"claimName": volume["claim"]}}
    else:
        size = (volume.get("empty_dir") or {}).get("size")
        source = {"emptyDir": {"sizeLimit": gib_quantity(size)} if size else {}}
    mount = {"name": name, "mountPath": volume["mount_path"]}
    if volume.get("read_only") or "secret" in volume or "config_map" in volume:
        mount["readOnly"] = True  # secrets and ConfigMaps are read-only anyway: say so
    return {"volume": {"name": name, **source}, "mount": mount}


def render_manifests(values: dict, directory: Path | None = None) -> list[Manifest]:
    """Render validated ``values`` into manifests in apply order. Same values, same bytes."""
    env = environment(directory)
    context = {"v": values, "d": derive(values)}
    manifests = []
    for order, (kind, template_name) in enumerate(_TEMPLATES, start=1):
        text = render_template(env, template_name, context)
        if not text.strip():
            continue  # a template may render nothing (no claim when an existing one is used)
        try:
            document = yaml.load(text, Loader=FastSafeLoader)
        except yaml.YAMLError as exc:
            raise TemplateError(f"templates/{template_name} rendered invalid YAML: {exc}") from None
        if not isinstance(document, dict) or document.get("kind") != kind:
            raise TemplateError(f"templates/{template_name} must render one {kind} object")
        manifests.append(Manifest(kind, f"{order}-{kind.lower()}.yaml", text))
    return manifests


def to_stream(manifests: list[Manifest]) -> str:
    """One multi-document YAML stream, in apply order, for ``kubectl apply -f -``."""
    return "".join(f"---\n{manifest.text}" for manifest in manifests)
