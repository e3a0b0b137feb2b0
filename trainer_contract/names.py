"""The names a Job's objects and pods derive from its `name`: one definition, used by validation, rendering
and local-job alike.

A pod's hostname is the Indexed Job controller's rule (`<job>-<completion index>`); with the headless Service
as its subdomain it resolves as `<job>-<index>.<service>`, which is how pods find rank 0's rendezvous.
"""

from __future__ import annotations

import hashlib
import json

# A pod's hostname, <job>-<index>, is a DNS-1123 label.
MAX_HOSTNAME = 63
# The label the Job controller puts on every pod of a Job: the Job's uid (the downward API hands it to the
# launcher, which counts the gang's failed rounds under it).
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
# The Job controller's other marks on every pod of an Indexed Job: its completion index (a label and an
# annotation of the same key) and the Job's name.
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# Kueue reads these from the Job only (it admits Jobs, not their pods): the render sets them, the status view reads them
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# The pod's training container (its init containers: check-config, stage): the podFailurePolicy's rules name it,
# the status views tell its state from theirs.
WORKER_CONTAINER = "worker"


def pod_hostname(job: str, index: int | str) -> str:
    return f"{job}-{index}"


def pod_address(job: str, index: int | str, service: str) -> str:
    """The DNS name of pod ``index`` (or the kubelet's $(JOB_COMPLETION_INDEX)) inside the namespace (the Service is
    the pods' subdomain)."""
    return f"{pod_hostname(job, index)}.{service}"


def longest_name(replicas: int) -> int:
    """The most characters a Job's name may have for ``replicas`` pods: every pod's hostname, ``<name>-<index>``,
    must fit in MAX_HOSTNAME (61 for up to 10 replicas, 60 for up to 100)."""
    return MAX_HOSTNAME - len(pod_hostname("", replicas - 1))


def rendezvous_address(job: str, service: str) -> str:
    """Where torchrun's static rendezvous listens: pod 0."""
    return pod_address(job, 0, service)


def lighthouse_name(job: str) -> str:
    """The replica groups' Lighthouse: its Deployment, and its Service, which the groups reach it by."""
    return f"{job}-lighthouse"


def stage_job_name(job: str) -> str:
    """The Job that stages the model, data and checkpoint before the training Job starts (initializer.separate_job):
    CPU and memory only, so that no GPU waits for a download."""
    return f"{job}-stage"



def claim_name(job: str) -> str:
    return f"{job}-data"


def config_map_name(job: str, data: dict[str, str]) -> str:
    """``<name>-config-<hash>``: the ConfigMap is immutable and named by its content, as Kustomize's generators
    name theirs, so a changed setting is a new ConfigMap and never reaches the pods of a running Job."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"{job}-config-{digest[:10]}"
