"""Render validated values into Kubernetes manifests: a pure, deterministic function of the values.

Python derives the few numbers the templates need (process counts, retry limits, quantities); the
templates in templates/ hold the manifests' shape, and every user value passes through ``to_yaml``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2
import yaml

from generator import __version__, names
from generator.errors import TemplateError
from generator.job import describe
from generator.quantities import cpu_quantity, gib_quantity
from generator.resources import templates_dir
from generator.values import FastSafeLoader
from generator.yamlsafe import to_yaml, to_yaml_mapping, to_yaml_string
from worker import contract

# The labels the Service selects the Job's pods by (values may not override them).
SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
# Oldest Kubernetes release where every Job field rendered here is GA (podReplacementPolicy: 1.34).
MIN_KUBERNETES = "1.34"


@dataclass(frozen=True)
class Manifest:
    """One rendered object: its kind, its file name under --output-dir (apply order first) and its YAML."""

    kind: str
    filename: str
    text: str


# Apply order: the claim and the ConfigMap must exist before pods reference them, the Service before
# pod 0's name must resolve.
_TEMPLATES = (
    ("PersistentVolumeClaim", "kubernetes/persistentvolumeclaim.yaml.j2"),
    ("ConfigMap", "kubernetes/configmap.yaml.j2"),
    ("Service", "kubernetes/service.yaml.j2"),
    ("Job", "kubernetes/job.yaml.j2"),
)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja's own per-user cache of compiled templates (keyed by their source): compiling the templates is
    a good part of gen-manifests' start-up. Without a safe temporary directory, templates just compile."""
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


@lru_cache(maxsize=4)
def _environment(directory: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error, never an empty string
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["yaml"] = to_yaml
    env.filters["yaml_string"] = to_yaml_string
    env.filters["yaml_mapping"] = to_yaml_mapping
    env.filters["sh"] = shlex.quote  # the Slurm script: a value as one shell word, whatever it holds
    return env


def environment(directory: Path | None = None) -> jinja2.Environment:
    """The strict Jinja environment of templates/ (every target renders through it)."""
    return _environment(directory or templates_dir())


def render_template(env: jinja2.Environment, template_name: str, context: dict) -> str:
    try:
        return env.get_template(template_name).render(context)
    except jinja2.TemplateError as exc:
        raise TemplateError(f"templates/{template_name}: {exc}") from None


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
    config = {**job.placement(contract.SHARED_MOUNT), **job.environment}
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
        "exit_bad_config": job.exit_codes.bad_config,
        "exit_peer_lost": job.exit_codes.peer_lost,
        "shutdown_timeout": job.shutdown_timeout,
        "shared_mount": contract.SHARED_MOUNT,
        "launcher_command": list(contract.LAUNCHER_COMMAND),
        "check_config_command": list(contract.CHECK_CONFIG_COMMAND),
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
