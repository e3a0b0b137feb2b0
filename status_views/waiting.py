"""What a job waits for, in words, with the values key to change: one table per thing a scheduler reports (the
Kubernetes scheduler's Unschedulable message, a container's waiting reason, a suspended Job, a Slurm pending
reason), one line per reason in one style for both status views (status_views/kubernetes.py, status_views/slurm.py):

    waiting: <subject>: <what it waits for>: <the scheduler's own words>: <what to change>

Each rule's words and change are templates over the facts of the job as it was submitted ({gpus}, {cpu}, ...),
so that the line names the key with its current value. Pure functions over kubectl's and scontrol's output;
torch-free, no subprocess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    pattern: str  # a regular expression searched in the scheduler's text (a reason code, a message fragment)
    words: str  # what the job waits for
    change: str  # what to change, naming the values keys; "" when nothing of the values can help


class Facts(dict):
    """The job's current values by name; a template's field the job does not have reads as '?'."""

    def __missing__(self, key: str) -> str:
        return "?"


def fill(template: str, facts: Mapping[str, str]) -> str:
    return template.format_map(Facts(facts))


def classify(rules: Iterable[Rule], text: str) -> Rule | None:
    """The first rule whose pattern occurs in text."""
    return next((rule for rule in rules if re.search(rule.pattern, text)), None)


def waiting_line(subject: str, words: str, detail: str = "", change: str = "") -> str:
    return "waiting: " + ": ".join(part for part in (subject, words, detail, change) if part)


# --- Kubernetes: the scheduler's Unschedulable message ("0/3 nodes are available: 1 node(s) had untolerated taint
# {dedicated: gpu}, 2 Insufficient nvidia.com/gpu. preemption: ..."), one rule per fragment kind
UNSCHEDULABLE = (
    Rule(r"Insufficient cpu\b", "", "lower resources.cpu ({cpu} per pod) or free CPUs on the nodes"),
    Rule(r"Insufficient memory\b", "", "lower resources.memory ({memory} per pod) or free memory on the nodes"),
    Rule(r"Insufficient (?!cpu\b|memory\b|ephemeral-storage\b|pods\b)\S+", "",
         "lower resources.gpu.accelerator_count ({gpus}) or add nodes with that many free GPUs ({gpu_resource})"),
    Rule(r"untolerated taint", "", "add a toleration for that taint to tolerations"),
    Rule(r"didn't match Pod's node affinity/selector", "",
         "no node has the labels of node_selector and resources.gpu.accelerator ({node_selector}): change them, "
         "or label nodes so"),
    Rule(r"unbound immediate PersistentVolumeClaims|persistentvolumeclaim \S+ not found", "",
         "the shared volume's claim is not bound: set shared_volume.storage_class (several pods need a "
         "ReadWriteMany class) or shared_volume.existing_claim"),
    Rule(r"volume node affinity conflict", "",
         "the claim's volume is on nodes the pods cannot use: set shared_volume.storage_class"),
    Rule(r"were unschedulable", "", "those nodes are cordoned: wait for them, or add nodes"),
    Rule(r"Too many pods", "", "those nodes hold all the pods they may: wait, or add nodes"),
)

# --- Kubernetes: a container's waiting reason with its message ("ReasonName: message"), or a pod's warning event
CONTAINER = (
    Rule(r"^(ErrImagePull|ImagePullBackOff):", "the image cannot be pulled",
         "check image ({image}) and, for a private registry, image_pull_secrets ({pull_secrets})"),
    Rule(r"^InvalidImageName:", "the image name is invalid", "fix image ({image})"),
    Rule(r"^ErrImageNeverPull:", "the image is not on the node and image_pull_policy is Never",
         "set image_pull_policy: IfNotPresent, or put image ({image}) on the nodes"),
    Rule(r"^CreateContainerConfigError:.*(run as root|runAsNonRoot|non-numeric user)",
         "the image's user breaks the pod's non-root rule", "set security.run_as_user to the image's uid"),
    Rule(r"^CreateContainerConfigError:.*(?i:configmap)", "a ConfigMap the pod names is missing",
         "./run.sh applies the Job's own (config_map); extra_volumes and env (configMapKeyRef) name the others"),
    Rule(r"^CreateContainerConfigError:", "a Secret (or its key) the pod names is missing",
         "create it, or fix env_from_secrets, env (secretKeyRef) or the *_secret keys (initializer.*.storage_uri_secret, "
         "checkpoint.signing_secret)"),
    Rule(r"^FailedMount:", "a volume cannot be mounted",
         "check shared_volume (the claim) and extra_volumes (each Secret, ConfigMap and claim must exist)"),
)

# --- Kubernetes: a Job with spec.suspend true ("Kueue: QUEUE" with the label, else "suspended")
SUSPENDED = (
    Rule(r"^Kueue:", "Kueue has not admitted it in LocalQueue {queue} yet (the whole gang's quota at once)",
         "wait, or change queue_name, or lower replicas and resources to fit the queue's quota "
         "(kubectl -n {namespace} get workloads says why)"),
    Rule(r"^suspended", "suspended (spec.suspend: true) by someone else, not by these values",
         "resume it: kubectl -n {namespace} patch job {job} --type=merge -p '{{\"spec\":{{\"suspend\":false}}}}'"),
)


def unschedulable(message: str, facts: Mapping[str, str]) -> str:
    """A pod the scheduler cannot place: its reasons, then what to change for each kind of fragment they hold.

    The scheduler writes "0/N nodes are available: <reasons>." and then what its PostFilter plugins say
    (preemption's "preemption: ...", dynamic resources' "no new claims to deallocate,"): the first ". " ends
    the reasons."""
    shown = re.split(r"\.? ?preemption: |\. ", message.strip(), maxsplit=1)[0].rstrip(".")
    changes: list[str] = []
    for fragment in re.split(r", (?=\d+ )", shown.split(": ", 1)[-1]):
        rule = classify(UNSCHEDULABLE, fragment)
        if rule and fill(rule.change, facts) not in changes:
            changes.append(fill(rule.change, facts))
    return ": ".join(["unschedulable", shown, "; ".join(changes) or "kubectl describe pod says more"])


def container_waiting(reason: str, message: str, facts: Mapping[str, str]) -> str | None:
    """A container (or a pod's warning event) that keeps the pod from starting, or None for a normal wait
    (ContainerCreating, PodInitializing)."""
    rule = classify(CONTAINER, f"{reason}: {message}")
    if rule is None:
        return None
    return ": ".join(part for part in (f"{reason}: {fill(rule.words, facts)}", message.strip(),
                                       fill(rule.change, facts)) if part)


def suspended(queue: str | None, facts: Mapping[str, str], detail: str = "") -> str:
    rule = classify(SUSPENDED, f"Kueue: {queue}" if queue else "suspended")
    assert rule is not None
    return ": ".join(part for part in (fill(rule.words, {**facts, "queue": queue or ""}), detail,
                                       fill(rule.change, facts)) if part)


# --- Kubernetes: a pod deleted (its node's taint eviction, a drain, kubectl delete) whose grace period ran out
# and that has not ended: its kubelet has not confirmed the end, as on a node that is down or cut off from the API
# server. A Job with a podFailurePolicy replaces a pod only once it has ended (podReplacementPolicy: Failed, the one
# value allowed with it), and the pod garbage collector ends such a pod only once its Node is deleted or, not
# Ready, tainted out of service (Kubernetes' non-graceful node shutdown): until then its index has no pod.
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


def ending_unconfirmed(facts: Mapping[str, str]) -> str:
    """A pod past its grace period that its node has not confirmed ended (facts: node, overdue, index, why)."""
    return fill("its end is unconfirmed {overdue} past its grace period ({why}): node {node}'s kubelet does not "
                "answer; the Job gives index {index} a new pod only once this one has ended (podReplacementPolicy: "
                "Failed, which a podFailurePolicy requires), and the gang's other pods wait in place for it (up to "
                "join_timeout_seconds): once node {node} is down for good, mark it out of service: kubectl taint "
                "nodes {node} " + OUT_OF_SERVICE_TAINT + " (or kubectl delete node {node}); the pod then ends "
                "uncounted and index {index} starts elsewhere", facts)


# --- Slurm: squeue's pending reason (man squeue, JOB REASON CODES; https://slurm.schedmd.com/job_reason_codes.html)
ASK_LESS = "replicas ({nodes} nodes), resources.cpu ({cpus} CPUs per node), resources.memory ({memory} per node)"
SLURM = (
    Rule(r"^Resources$", "the nodes it asks for are in use by other jobs",
         "it starts when they are free, sooner with less: " + ASK_LESS + "{gpus_part}"),
    Rule(r"^Priority$", "jobs of higher priority are ahead of it in partition {partition}; it starts after them",
         "nothing to change (slurm.qos or slurm.partition, where the site offers a faster one)"),
    Rule(r"^ReqNodeNotAvail", "nodes it needs are not available (down, drained, reserved or in use)",
         "wait, ask the administrators, or choose another slurm.partition ({partition})"),
    Rule(r"^PartitionTimeLimit$", "its time limit ({time_limit}) is longer than partition {partition} allows "
         "(MaxTime {max_time})", "lower slurm.time_limit, or choose another slurm.partition"),
    Rule(r"^PartitionNodeLimit$", "its {nodes} nodes are outside partition {partition}'s limits (MinNodes "
         "{min_nodes}, MaxNodes {max_nodes}), or some of its nodes are down or drained",
         "change replicas ({nodes}), or choose another slurm.partition"),
    Rule(r"^PartitionConfig$", "it asks for what partition {partition} does not allow (nodes, account or QOS)",
         "check replicas ({nodes}), slurm.account and slurm.qos, or choose another slurm.partition"),
    Rule(r"^Partition(Down|Inactive)$", "partition {partition} does not start jobs now",
         "wait, or choose another slurm.partition"),
    Rule(r"^BadConstraints$", "no node can satisfy what it asks for",
         "check resources.gpu.accelerator and slurm.extra_options' --constraint (features: {features}), "
         "resources.gpu.accelerator_count ({gpus}), resources.cpu ({cpus}) and resources.memory ({memory})"),
    Rule(r"^(InvalidAccount|AccountNotAllowed)$", "account {account} is not valid here",
         "set slurm.account to one of yours (sacctmgr show associations user=$USER)"),
    Rule(r"^(InvalidQOS|QOSNotAllowed)$", "QOS {qos} is not valid here",
         "set slurm.qos to one of yours (sacctmgr show associations user=$USER)"),
    Rule(r"^JobHeldUser$", "held by its user", "release it: scontrol release {job_id}"),
    Rule(r"^JobHeldAdmin$", "held by an administrator", "ask them to release it"),
    Rule(r"^Dependency$", "it waits for the jobs it depends on ({dependency})", ""),
    Rule(r"^DependencyNeverSatisfied$", "it depends on a job that can no longer satisfy it ({dependency})",
         "scancel {job_id}"),
    Rule(r"^BeginTime$", "its start time is not reached yet (a requeued job waits a moment before it restarts)", ""),
    Rule(r"^Cleaning$", "it was requeued and its previous run is still being cleaned up", ""),
    Rule(r"^NodeDown$", "a node it needs is down", "wait, or ask the administrators"),
    Rule(r"^Reservation$", "it waits for its advanced reservation to start",
         "check slurm.extra_options' --reservation"),
    Rule(r"^Licenses$", "it waits for a license", ""),
    Rule(r"^(None|WaitingForScheduling|Prolog)$", "the scheduler has not placed it yet", ""),
)

# Assoc*/QOS* limits: the scope after the owner, then the resource ("QOSMaxCpuPerUserLimit", "AssocGrpGRES")
LIMIT_SCOPES = (
    Rule(r"^(Assoc|QOS)?Grp", "the running jobs of {owner} together hold all the {noun} it allows",
         "it starts when some of them end, sooner with less: {key}; or use another {owner_key}"),
    Rule(r"^(Assoc|QOS)?Max\w*Per(User|Account)", "your {per}'s running jobs together hold all the {noun} "
         "{owner} allows each {per}", "it starts when some of them end, sooner with less: {key}"),
    Rule(r"^(Assoc|QOS)?Max", "it asks for more {noun} than {owner} allows a job, so it cannot start as it is",
         "lower {key}, or use another {owner_key}"),
    Rule(r"^(Assoc|QOS)?Min", "it is below the {noun} {owner} requires of a job", "raise {key}"),
)
LIMIT_RESOURCES = (  # (pattern right after the scope, noun, keys)
    ("Cpu|CPU", "CPUs", "resources.cpu ({cpus} per node) or replicas ({nodes})"),
    ("Mem", "memory", "resources.memory ({memory} per node) or replicas ({nodes})"),
    ("Node", "nodes", "replicas ({nodes})"),
    ("GRES|Gres|TRES", "GPUs (generic resources)", "resources.gpu.accelerator_count ({gpus} per node) or "
     "replicas ({nodes})"),
    ("Wall|Time", "run time", "slurm.time_limit ({time_limit})"),
    ("Job|Submit", "jobs", "the number of your jobs in the queue"),
    ("Billing", "billing units", ASK_LESS),
)


def _limit(reason: str, facts: Mapping[str, str]) -> tuple[str, str] | None:
    scope = classify(LIMIT_SCOPES, reason)
    kind = re.match(r"^(Assoc|QOS)?(Grp|Max|Min)(\w*?)(Limit)?$", reason)
    if scope is None or kind is None:
        return None
    noun, key = next(((noun, key) for pattern, noun, key in LIMIT_RESOURCES if re.match(pattern, kind.group(3))),
                     ("resources", ASK_LESS))
    assoc = kind.group(1) == "Assoc"
    owner = f"account {facts.get('account', '?')}" if assoc else f"QOS {facts.get('qos', '?')}"
    per = "account" if "PerAccount" in reason else "user"
    fields = {**facts, "owner": owner, "owner_key": "slurm.account" if assoc else "slurm.qos", "noun": noun,
              "per": per, "key": fill(key, facts)}
    return fill(scope.words, fields), fill(scope.change, fields)


def slurm_pending(reason: str, facts: Mapping[str, str]) -> tuple[str, str]:
    """squeue's reason for a pending job: what it waits for and what to change (the values keys)."""
    code = reason.split(",", 1)[0]
    rule = classify(SLURM, code)
    if rule is not None:
        return fill(rule.words, facts), fill(rule.change, facts)
    limit = _limit(code, facts)
    if limit is not None:
        return limit
    if code.startswith(("Association", "QOS")):  # AssociationJobLimit, QOSResourceLimit, QOSUsageThreshold, ...
        return "a limit of its account or QOS is reached", "wait, or use another slurm.account or slurm.qos"
    return "see JOB REASON CODES in man squeue", ""
