"""Reading the rendered manifests and checking that they describe a Job this runner can run faithfully."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trainer_contract.names import stage_job_name
from trainer_contract.pod_environment import reserved
from trainer_contract.replica_groups import lighthouse_command

LIGHTHOUSE_COMMAND = lighthouse_command(1)[0]

SUPPORTED_VOLUMES = ("persistentVolumeClaim", "emptyDir", "configMap", "secret")
SUPPORTED_FIELDS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                    "spec.serviceAccountName", "status.podIP", "status.hostIP")
MAX_LOCAL_PODS = 64


class ManifestError(Exception):
    """The manifests cannot be run here; each problem says why."""

    def __init__(self, *problems: str):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass
class JobPlan:
    job: dict
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    services: dict[str, dict] = field(default_factory=dict)
    claims: set[str] = field(default_factory=set)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)  # from --secret, never from the manifests
    # objects that change nothing of how the Job runs here (a NetworkPolicy: the pods are this machine's processes)
    not_enforced: list[str] = field(default_factory=list)  # a line each: an object this machine does not apply
    # the replica groups' Lighthouse (a Deployment beside the Job: trainer_contract/replica_groups.py), run here too
    lighthouse: dict | None = None
    # the Job that stages before this one (initializer.separate_job), run here to its completion first
    stage: JobPlan | None = None

    @property
    def name(self) -> str:
        return self.job["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.job["metadata"].get("namespace", "default")

    @property
    def spec(self) -> dict:
        return self.job["spec"]

    @property
    def pod_template(self) -> dict:
        return self.spec["template"]

    @property
    def pod_spec(self) -> dict:
        return self.pod_template["spec"]

    @property
    def completions(self) -> int:
        return int(self.spec.get("completions", 1))

    @property
    def parallelism(self) -> int:
        return min(int(self.spec.get("parallelism", 1)), self.completions)

    @property
    def backoff_limit(self) -> int:
        default = 2**31 - 1 if "backoffLimitPerIndex" in self.spec else 6
        return int(self.spec.get("backoffLimit", default))

    @property
    def grace_seconds(self) -> float:
        return float(self.pod_spec.get("terminationGracePeriodSeconds", 30))

    @property
    def headless_service(self) -> dict | None:
        return self.services.get(self.pod_spec.get("subdomain", ""))


def read_source(source: str) -> list[dict]:
    """Documents from a file, every *.yaml/*.yml/*.json of a directory (in name order), or stdin ("-")."""
    if source == "-":
        texts = [("<stdin>", sys.stdin.buffer.read().decode("utf-8"))]
    else:
        path = Path(source)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
            if not files:
                raise ManifestError(f"{path}: no .yaml, .yml or .json files in this directory")
        elif path.is_file():
            files = [path]
        else:
            raise ManifestError(f"{path}: no such file or directory")
        texts = [(str(p), p.read_text(encoding="utf-8")) for p in files]
    documents: list[dict] = []
    for origin, text in texts:
        try:
            documents.extend(doc for doc in yaml.safe_load_all(text) if doc)
        except yaml.YAMLError as exc:
            raise ManifestError(f"{origin}: not valid YAML: {exc}") from None
    if not all(isinstance(doc, dict) and "kind" in doc for doc in documents):
        raise ManifestError("every document must be a Kubernetes object with a kind")
    return documents


def plan(documents: list[dict], secrets: dict[str, dict[str, str]] | None = None) -> JobPlan:
    """Find the Job and what it references; refuse anything that would not run as it would on a cluster.

    ``secrets`` stand for the cluster's Secrets (local-job --secret); a Secret in the manifests is refused,
    as its values would then sit in a file beside them."""
    training, staging = jobs_of(documents)
    result = JobPlan(training, secrets=dict(secrets or {}))
    for doc in documents:
        kind, name = doc["kind"], doc.get("metadata", {}).get("name", "")
        if kind == "ConfigMap":
            result.config_maps[name] = {k: str(v) for k, v in (doc.get("data") or {}).items()}
        elif kind == "Service":
            result.services[name] = doc.get("spec", {})
        elif kind == "PersistentVolumeClaim":
            result.claims.add(name)
        elif kind == "NetworkPolicy":
            result.not_enforced.append(f"{kind} {name}: not enforced here (the pods are processes of this machine, "
                                       "on its network)")
        elif kind == "PodMonitor":
            result.not_enforced.append(f"{kind} {name}: not applied here (no Prometheus Operator; `local-job status` "
                                       "shows the live metrics)")
        elif kind == "Deployment" and _is_lighthouse(doc) and result.lighthouse is None:
            result.lighthouse = doc
        elif kind == "Secret":
            raise ManifestError(f"Secret {name}: a Secret does not belong beside the manifests (its values would be in "
                                f"plain text there); give it to local-job with --secret {name}=PATH")
        elif kind != "Job":
            raise ManifestError(f"{kind} {name}: local-job runs Jobs with their ConfigMaps, Services, claims, "
                                "NetworkPolicies and PodMonitors only (and one Deployment: replica groups' Lighthouse)")
    if staging:
        result.stage = JobPlan(staging[0], result.config_maps, result.services, result.claims, result.secrets)
    problems = [*_job_problems(result), *(_job_problems(result.stage) if result.stage is not None else ())]
    if problems:
        raise ManifestError(*problems)
    return result


def jobs_of(documents: list[dict]) -> tuple[dict, list[dict]]:
    """The training Job of the manifests, and its stage Job if they hold one (initializer.separate_job: the Job
    named after it, <name>-stage); ManifestError for any other count of Jobs."""
    jobs = [doc for doc in documents if doc.get("kind") == "Job"]
    named = {(job.get("metadata") or {}).get("name") for job in jobs}
    staging = [job for job in jobs if any((job.get("metadata") or {}).get("name") == stage_job_name(other)
                                          for other in named if other)]
    training = [job for job in jobs if all(job is not stage for stage in staging)]
    if len(training) != 1 or len(staging) > 1:
        raise ManifestError(f"expected exactly one Job in the manifests (and its stage Job, named "
                            f"{stage_job_name('<name>')}: initializer.separate_job), found {len(jobs)}")
    return training[0], staging


def _is_lighthouse(deployment: dict) -> bool:
    """A Deployment of one pod whose one container runs torchft's Lighthouse (the render's, for replica groups)."""
    containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return len(containers) == 1 and (containers[0].get("command") or [None])[0] == LIGHTHOUSE_COMMAND


def _job_problems(plan: JobPlan) -> list[str]:
    """What keeps the Job from running here as it would on a cluster, each check in the order it reads."""
    where = f"Job {plan.name}"
    pod = plan.pod_spec
    volumes, problems = _volume_problems(plan, where)
    return [*_job_shape_problems(plan, where), *problems,
            *(problem for container in (pod.get("initContainers") or []) + (pod.get("containers") or [])
              for problem in _container_problems(plan, where, container, volumes)),
            *_secret_key_problems(plan), *_service_problems(plan, where)]


def _job_shape_problems(plan: JobPlan, where: str) -> Iterator[str]:
    """The Job and pod fields local-job needs as they are: Indexed, restartPolicy Never, one container."""
    job, spec, pod = plan.job, plan.spec, plan.pod_spec
    if job.get("apiVersion") != "batch/v1":
        yield f"{where}: apiVersion must be batch/v1"
    if spec.get("completionMode") != "Indexed":
        yield (f"{where}: only Indexed Jobs can be run (spec.completionMode is "
               f"{spec.get('completionMode', 'NonIndexed')}): their pods need JOB_COMPLETION_INDEX")
    if plan.completions > MAX_LOCAL_PODS:
        yield f"{where}: {plan.completions} pods are too many for one machine (at most {MAX_LOCAL_PODS})"
    if pod.get("restartPolicy") != "Never":
        yield f"{where}: spec.template.spec.restartPolicy must be Never (the Job replaces failed pods)"
    containers = pod.get("containers") or []
    if len(containers) != 1:
        yield f"{where}: the pod must have exactly one container (it has {len(containers)})"
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            yield f"{where}: {key} cannot be reproduced locally"


def _volume_problems(plan: JobPlan, where: str) -> tuple[dict[str, dict], list[str]]:
    """The pod's volumes local-job can stand in for, by name, and what is wrong with the others."""
    volumes, problems = {}, []
    for volume in plan.pod_spec.get("volumes") or []:
        kinds = [k for k in volume if k != "name"]
        if not kinds or kinds[0] not in SUPPORTED_VOLUMES:
            problems.append(f"{where}: volume {volume.get('name')}: type {kinds[0] if kinds else '?'} is not "
                            f"supported locally (supported: {', '.join(SUPPORTED_VOLUMES)})")
            continue
        volumes[volume["name"]] = volume
        if kinds[0] == "configMap" and volume["configMap"]["name"] not in plan.config_maps:
            problems.append(f"{where}: volume {volume['name']} uses ConfigMap {volume['configMap']['name']}, "
                            "which is not in the manifests")
        if kinds[0] == "secret":
            problems.extend(_secret_problem(plan, where, f"volume {volume['name']}", volume["secret"]["secretName"],
                                            optional=volume["secret"].get("optional")))
    return volumes, problems


def _container_problems(plan: JobPlan, where: str, container: dict, volumes: dict[str, dict]) -> Iterator[str]:
    """A container's command, mounts and environment sources."""
    cname = container.get("name", "?")
    if not container.get("command"):
        yield (f"{where}: container {cname} has no command; the image's entrypoint is not known here, so the "
               "command must be in the manifest")
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") not in volumes:
            yield f"{where}: container {cname} mounts unknown volume {mount.get('name')}"
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef")
        if "secretRef" in source:
            yield from _secret_problem(plan, where, f"container {cname} envFrom", source["secretRef"]["name"],
                                       optional=source["secretRef"].get("optional"))
        elif ref is None:
            yield f"{where}: container {cname}: only envFrom configMapRef and secretRef are supported"
        elif ref["name"] not in plan.config_maps and not ref.get("optional"):
            yield f"{where}: container {cname} takes env from ConfigMap {ref['name']}, which is not in the manifests"
    for variable in container.get("env") or []:
        yield from _value_from_problems(plan, where, variable)


def _value_from_problems(plan: JobPlan, where: str, variable: dict) -> Iterator[str]:
    """An env variable's valueFrom: the sources local-job can give (fields, ConfigMaps, Secrets, resources)."""
    value_from = variable.get("valueFrom")
    if not value_from:
        return
    if "fieldRef" in value_from:
        path = value_from["fieldRef"]["fieldPath"]
        if path not in SUPPORTED_FIELDS and not path.startswith(("metadata.labels[", "metadata.annotations[")):
            yield f"{where}: env {variable['name']}: fieldPath {path} is not supported locally"
    elif "configMapKeyRef" in value_from:
        ref = value_from["configMapKeyRef"]
        if ref["name"] not in plan.config_maps and not ref.get("optional"):
            yield f"{where}: env {variable['name']} uses ConfigMap {ref['name']}, not in the manifests"
    elif "secretKeyRef" in value_from:
        ref = value_from["secretKeyRef"]
        yield from _secret_problem(plan, where, f"env {variable['name']}", ref["name"], ref["key"],
                                   optional=ref.get("optional"))
    elif "resourceFieldRef" not in value_from:
        yield f"{where}: env {variable['name']}: {next(iter(value_from))} is not supported locally"


def _secret_key_problems(plan: JobPlan) -> Iterator[str]:
    for name, data in plan.secrets.items():
        for key in sorted(data):
            if reserved(key):
                yield (f"--secret {name}: key {key} is set by torchrun or the Job for every process; a Secret must "
                       "not set it")


def _service_problems(plan: JobPlan, where: str) -> Iterator[str]:
    """The headless Service that gives the pods their DNS names."""
    subdomain = plan.pod_spec.get("subdomain")
    if not subdomain:
        return
    service = plan.services.get(subdomain)
    labels = plan.pod_template.get("metadata", {}).get("labels", {})
    if service is None:
        yield (f"{where}: the pods' subdomain {subdomain} names a Service that is not in the manifests; without "
               "it the pods could not find each other")
    elif service.get("clusterIP") != "None":
        yield f"Service {subdomain}: must be headless (clusterIP: None) to give pods DNS names"
    elif not (service.get("selector") or {}).items() <= labels.items():
        yield f"Service {subdomain}: its selector does not match the Job's pod labels"


def _secret_problem(plan: JobPlan, where: str, user: str, name: str, key: str | None = None,
                    optional: bool | None = False) -> list[str]:
    """The Secret (and key) the pod needs must be given with --secret: a missing one is named, never a value."""
    if name not in plan.secrets:
        return [] if optional else [
            f"{where}: {user} needs Secret {name}: provide it with --secret {name}=PATH (a file of KEY=VALUE lines, "
            "or a directory of one file per key)"]
    if key is not None and key not in plan.secrets[name] and not optional:
        return [f"{where}: {user} needs key {key} of Secret {name}, which has only: "
                f"{', '.join(sorted(plan.secrets[name])) or '(no keys)'}"]
    return []
