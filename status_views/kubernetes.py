"""`./run.sh --status`: the Job on the cluster as a person asks about it. Its conditions, each completion index's
pods with their exit codes and what each code means (trainer_contract/exit_codes.py) and termination message, what
a suspended Job, a Pending pod or a pod whose node does not let it end waits for, with the values key to change or
what to do (status_views/waiting.py), and the latest progress line of index 0 (rank 0). Reads with kubectl;
torch-free.

    python -m status_views.kubernetes NAMESPACE JOB           # the lines, once
    python -m status_views.kubernetes NAMESPACE JOB --wait    # a line at each change until the Job ends; exits 0
                                                                #   Complete, 1 Failed (or gone)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime, timezone

from status_views.view import JobGone, JobState, ViewError, follow
from status_views.waiting import container_waiting, ending_unconfirmed, suspended, unschedulable, waiting_line
from trainer_contract import exit_codes
from trainer_contract.exit_codes import meaning
from trainer_contract.launcher import LAUNCHER_WARNING
from trainer_contract.metrics import PATH, PORT_NAME, parse, summary
from trainer_contract.names import INDEX_LABEL, JOB_NAME_LABEL, KUEUE_QUEUE_LABEL, WORKER_CONTAINER, stage_job_name
from trainer_contract.progress import format_duration
from trainer_contract.replica_groups import GROUP


class KubectlError(ViewError):
    pass


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


# A kubelet confirms a deleted pod's end within seconds of its grace period (it kills the containers then): this
# long after it, the node's kubelet is not answering.
UNCONFIRMED_AFTER_SECONDS = 15.0


def terminating(pod: dict) -> bool:
    """Deleted (a deletionTimestamp) and not yet ended: kubectl's "Terminating"."""
    return bool(pod["metadata"].get("deletionTimestamp")) and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


# The closing line of a built-in program that refused to start (trainer_runtime's "exiting with code N (...)"):
# it repeats the code the view shows beside its meaning; the line before it says why.
CLOSING_LINE = "exiting with code "


def telling_line(message: str) -> str | None:
    """The line of a termination message (the launcher's, or the kubelet's tail of the log) that says why: the
    last one, unless that only repeats the exit code."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    chosen = [line for line in lines if CLOSING_LINE not in line] or lines
    return chosen[-1] if chosen else None


def telling_container(pod: dict) -> tuple[str, dict]:
    """The container whose state tells how the pod stands, (its name where it is not the worker, its state): an
    init container (check-config, stage) that ended with an error (the pod failed there: the worker never ran,
    its own state says only PodInitializing), else the worker."""
    status = pod.get("status") or {}
    for container in status.get("initContainerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated") or {}
        if ended.get("exitCode"):
            return f" in {container.get('name', '?')}", container["state"]
    worker: dict = next(iter(status.get("containerStatuses") or []), {})
    return "", worker.get("state") or {}


def pod_line(pod: dict, now: datetime) -> str:
    """One pod: its name, phase, how long it has run or how it ended (exit code, meaning, message)."""
    name, status = pod["metadata"]["name"], pod.get("status") or {}
    phase = status.get("phase", "Unknown")
    where, state = telling_container(pod)
    if "terminated" in state:
        ended = state["terminated"]
        code = ended.get("exitCode")
        began, finished = _parse_time(ended.get("startedAt")), _parse_time(ended.get("finishedAt"))
        took = f" after {format_duration((finished - began).total_seconds())}" if began and finished else ""
        line = f"{name} {phase}, exit {code}{where}" + (f" ({meaning(code)})" if code else "") + took
        said = telling_line(ended.get("message") or "")
        return line + (f": {said}" if said else "")
    ending = ", Terminating" if terminating(pod) else ""
    if "running" in state:
        started = _parse_time(state["running"].get("startedAt"))
        return (f"{name} {phase}" + (f" for {format_duration((now - started).total_seconds())}" if started else "")
                + ending)
    waiting = (state.get("waiting") or {}).get("reason")
    return f"{name} {phase}" + (f" ({waiting})" if waiting else "") + ending


def last_error(pods: list[dict]) -> str | None:
    """The failure a person asks about first: the pod that ended last with a non-zero exit code, a root cause
    before a victim (75: a peer failed first; 143: stopped once the Job ended), with the code's meaning and its
    message (the launcher's termination message, or the log's tail)."""
    failed = []
    for pod in pods:
        where, state = telling_container(pod)
        ended = state.get("terminated")
        if ended and ended.get("exitCode"):
            cause = ended["exitCode"] not in exit_codes.codes_taking("free", "stop")  # not a victim
            failed.append((cause, ended.get("finishedAt") or pod["metadata"].get("creationTimestamp") or "", pod,
                           where, ended))
    if not failed:
        return None
    _, _, pod, where, ended = max(failed, key=lambda item: item[:2])
    said = telling_line(ended.get("message") or "")
    return (f"{pod['metadata']['name']} exit {ended['exitCode']}{where} ({meaning(ended['exitCode'])})"
            + (f": {said}" if said else ""))


def pod_facts(pod: dict) -> dict[str, str]:
    """What the pod asks for, as the values set it: for the waiting lines' templates."""
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or [{}]
    container = next((c for c in containers if c.get("name") == "worker"), containers[0])
    resources = container.get("resources") or {}
    limits = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    gpu = next((name for name in limits if name not in ("cpu", "memory", "ephemeral-storage")
                and not name.startswith("hugepages-")), "")
    selector = spec.get("nodeSelector") or {}
    return {"cpu": str(limits.get("cpu", "?")), "memory": str(limits.get("memory", "?")),
            "gpus": str(limits.get(gpu, 0)), "gpu_resource": gpu or "none",
            "node_selector": ", ".join(f"{key}={value}" for key, value in selector.items()) or "none set",
            "image": str(container.get("image", "?")),
            "pull_secrets": ", ".join(s.get("name", "?") for s in spec.get("imagePullSecrets") or []) or "none set"}


def _event_time(event: dict) -> str:
    return ((event.get("series") or {}).get("lastObservedTime") or event.get("lastTimestamp")
            or event.get("eventTime") or event["metadata"].get("creationTimestamp") or "")


def pod_waiting(pod: dict, events: list[dict]) -> str | None:
    """Why a Pending pod does not start, with the key to change; None when it is only starting."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending":
        return None
    facts = pod_facts(pod)
    name = pod["metadata"]["name"]
    own = sorted((e for e in events if (e.get("involvedObject") or {}).get("name") == name), key=_event_time)
    scheduled: dict = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") == "False" and scheduled.get("reason") == "SchedulingGated":
        gates = ", ".join(g.get("name", "?") for g in (pod.get("spec") or {}).get("schedulingGates") or [])
        return f"held by scheduling gates ({gates}): the controller that set them removes them"
    scheduling = [e.get("message", "") for e in own if e.get("reason") == "FailedScheduling"]
    if scheduled.get("status") == "False" and (scheduled.get("message") or scheduling):
        return unschedulable(scheduled.get("message") or scheduling[-1], facts)
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        said = container_waiting(waiting.get("reason", ""), waiting.get("message", ""), facts)
        if said:
            return f"container {container.get('name', '?')} {said}"
    for event in reversed(own):
        said = container_waiting(event.get("reason", ""), event.get("message", ""), facts)
        if said:
            return said
    return None


def ending_waits(pod: dict, now: datetime) -> str | None:
    """Why a deleted pod bound to a node has not ended long past its grace period (its node's kubelet does not
    answer), with what to do; None for a pod not deleted, or ending as it should."""
    deadline = _parse_time(pod["metadata"].get("deletionTimestamp"))
    node = (pod.get("spec") or {}).get("nodeName")
    if not terminating(pod) or deadline is None or not node:
        return None
    overdue = (now - deadline).total_seconds()
    if overdue < UNCONFIRMED_AFTER_SECONDS:
        return None
    disruption: dict = next((c for c in (pod.get("status") or {}).get("conditions") or []
                       if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), {})
    why = f"DisruptionTarget {disruption['reason']}" if disruption.get("reason") else "deleted"
    index = (pod["metadata"].get("labels") or {}).get(INDEX_LABEL, "?")
    return ending_unconfirmed({"node": node, "overdue": format_duration(overdue), "index": index, "why": why})


def waiting_lines(job: dict, pods: list[dict], events: list[dict], kueue: str = "",
                  now: datetime | None = None) -> list[str]:
    """What the Job and its Pending pods, and its pods whose end their node does not confirm, wait for: a line per
    reason, pods with the same reason on one line."""
    now = now or datetime.now(timezone.utc)
    meta, spec = job["metadata"], job.get("spec") or {}
    lines = []
    finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in (job.get("status") or {}).get("conditions") or [])
    if spec.get("suspend") and not finished:
        queue = (meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        facts = {"namespace": meta.get("namespace", "default"), "job": meta["name"]}
        lines.append(waiting_line(f"Job {facts['namespace']}/{meta['name']}", suspended(queue, facts, kueue)))
    by_reason: dict[str, list[str]] = {}
    for pod in sorted(pods, key=lambda p: int((p["metadata"].get("labels") or {}).get(INDEX_LABEL, -1))):
        index = (pod["metadata"].get("labels") or {}).get(INDEX_LABEL, "?")
        reason = pod_waiting(pod, events)
        if reason:
            by_reason.setdefault(reason, []).append(f"index {index} pod {pod['metadata']['name']} Pending")
        ending = ending_waits(pod, now)
        if ending:
            by_reason.setdefault(ending, []).append(f"index {index} pod {pod['metadata']['name']} Terminating")
    for reason, subjects in by_reason.items():
        more = len(subjects) - 1
        lines.append(waiting_line(subjects[0] + (f" (and {more} more pod{'s' * (more > 1)})" if more else ""),
                                  reason))
    return lines


def no_pod_line(conditions: list[dict]) -> str:
    """An index without a pod. A Job that fails, or completes by its successPolicy, has the controller delete its
    running pods: once terminated they are gone from the API, which a bare "no pod" would leave the user to guess."""
    last = conditions[-1] if conditions else {}
    if last.get("type") == "Failed":
        return "no pod left (a failed Job's running pods are deleted)"
    if last.get("type") == "Complete" and last.get("reason") == "SuccessPolicy":
        return "no pod left (a Job that met its successPolicy has its running pods deleted)"
    return "no pod"


def describe(job: dict, pods: list[dict], progress: str | None, now: datetime | None = None,
             warnings: list[str] | tuple[str, ...] = (), events: list[dict] | None = None,
             kueue: str = "", live: str | None = None, reporter: int = 0, groups: bool = False) -> list[str]:
    """The Job, a line per index and pod, what the Job and its pods wait for, with ``groups`` (replica groups) a
    line of the groups, the latest progress and live metrics (``live``: a scrape's line, trainer_contract/metrics.py)
    of index ``reporter`` (reporting_index), the launcher's warnings and the last error."""
    now = now or datetime.now(timezone.utc)
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    state = conditions[-1]["type"] if conditions else ("Suspended" if spec.get("suspend") else "Running")
    lines = [f"Job {meta.get('namespace', 'default')}/{meta['name']}: {state}; {status.get('active', 0)} active, "
             f"{status.get('succeeded', 0)} succeeded, {status.get('failed', 0)} failed (backoffLimit "
             f"{spec.get('backoffLimit', 6)})"]
    lines += [f"  {c['type']}: {c.get('reason', '')}: {c.get('message', '')}" for c in conditions]
    by_index = pods_by_index(pods)
    for index in range(int(spec.get("completions") or 0)):
        found = by_index.get(index, [])
        if not found:
            lines.append(f"index {index}: {no_pod_line(conditions)}")
        for number, pod in enumerate(found):
            lines.append(("index " + str(index) + ": " if number == 0 else " " * (len(str(index)) + 8))
                         + pod_line(pod, now))
    lines += waiting_lines(job, pods, events or [], kueue, now)
    if groups:
        lines.append(groups_line(job, pods))
    if progress:
        lines.append(f"index {reporter}'s latest progress: {progress}")
    if live:
        lines.append(f"index {reporter}'s live metrics: {live}")
    lines += [f"warning: {warning}" for warning in warnings]
    error = last_error(pods)
    if error:
        lines.append(f"last error: {error}")
    return lines


def pods_by_index(pods: list[dict]) -> dict[int, list[dict]]:
    """Each completion index's pods, oldest first."""
    by_index: dict[int, list[dict]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        index = (pod["metadata"].get("labels") or {}).get(INDEX_LABEL)
        if index is not None:
            by_index.setdefault(int(index), []).append(pod)
    return by_index


def has_replica_groups(job: dict) -> bool:
    """A Job of replica groups (fault_tolerance.replica_groups): its worker is told its group (REPLICA_GROUP)."""
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return any(variable.get("name") == GROUP for container in template.get("containers") or []
               if container.get("name") == WORKER_CONTAINER for variable in container.get("env") or [])


def _running(pods: list[dict]) -> list[int]:
    """The indexes whose newest pod runs (and is not being deleted)."""
    return sorted(index for index, found in pods_by_index(pods).items()
                  if (found[-1].get("status") or {}).get("phase") == "Running" and not terminating(found[-1]))


def reporting_index(pods: list[dict], groups: bool) -> int:
    """The index whose progress and live metrics the view shows: index 0, the gang's rank 0; of replica groups the
    lowest index whose pod runs (every group steps the job's steps, and index 0 may be the one restarting)."""
    running = _running(pods) if groups else []
    return running[0] if running else 0


def groups_line(job: dict, pods: list[dict]) -> str:
    """``replica groups: 2 of 3 running (indexes 0, 2); failed indexes 1 (at most 1 may fail: the others step
    without them)``: the groups' pods as the Job has them (the quorum itself is in the live metrics' line)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    running, completions = _running(pods), int(spec.get("completions") or 0)
    line = f"replica groups: {len(running)} of {completions} running"
    if running and len(running) < completions:
        line += f" (index{'es' if len(running) > 1 else ''} {', '.join(map(str, running))})"
    if status.get("failedIndexes"):
        bound = spec.get("maxFailedIndexes")
        line += f"; failed indexes {status['failedIndexes']}" + (
            f" (at most {bound} may fail: the others step without them)" if bound is not None else "")
    done = status.get("completedIndexes")
    if done:
        several = "," in done or "-" in done
        line += f"; succeeded: index{'es' if several else ''} {done} (the Job completes with its first group)"
    return line


def latest_progress(log: str) -> str | None:
    """The built-in worker's latest epoch or batch line of rank 0 (a replica group's: its step line), else the log's
    last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    progress = [line for line in lines if line.startswith(("Rank 0: epoch", "Rank 0: step "))]
    chosen = progress or lines
    return chosen[-1] if chosen else None


def launcher_warnings(log: str) -> list[str]:
    """The launcher's warnings in a pod's log (a GPU job training on the CPU), each once, without the prefix."""
    found = []
    for line in log.splitlines():
        _, marker, text = line.partition(LAUNCHER_WARNING)
        if marker and text.strip() and text.strip() not in found:
            found.append(text.strip())
    return found


def kubectl(*args: str) -> str:
    result = subprocess.run(["kubectl", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise KubectlError(result.stderr.strip() or f"kubectl {' '.join(args)} exited {result.returncode}")
    return result.stdout


def job_state(job: dict, pods: list[dict], lines: list[str]) -> JobState:
    """The Job as every engine's view has it (status_views/view.py): ``lines``, what a wait reports a change of
    (the conditions, the counts and each pod's phase; not ages nor progress) and, once the Job is Complete (0) or
    Failed (1), its exit code."""
    status = job.get("status") or {}
    ended = {c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"} & {"Complete", "Failed"}
    change = (tuple(sorted(ended)), status.get("active", 0), status.get("succeeded", 0), status.get("failed", 0),
              tuple((pod["metadata"]["name"], (pod.get("status") or {}).get("phase"), terminating(pod))
                    for pod in pods))
    return JobState(lines, change, (1 if "Failed" in ended else 0) if ended else None)


def read_state(namespace: str, name: str, staged: bool = True) -> JobState:
    """Job NAMESPACE/NAME, its pods, the latest progress, warnings and live metrics of its reporting index (index
    0, or of replica groups the first that runs), through kubectl. Before it is applied, its stage Job's where it
    has one (initializer.separate_job; ``staged``: look for it)."""
    try:
        job = json.loads(kubectl("-n", namespace, "get", "job", name, "-o", "json"))
    except KubectlError as error:
        if "(NotFound)" not in str(error):
            raise
        staging = stage_state(namespace, name) if staged else None
        if staging is None:
            raise JobGone(f"Job {namespace}/{name} is not on the cluster (deleted, or never applied)") from None
        return staging
    pods = json.loads(kubectl("-n", namespace, "get", "pods", "-l", f"{JOB_NAME_LABEL}={name}", "-o", "json"))["items"]
    groups = has_replica_groups(job)
    reporter = reporting_index(pods, groups)
    leaders = pods_by_index(pods).get(reporter, [])
    progress, warnings = None, []
    if leaders:
        leader = leaders[-1]["metadata"]["name"]
        try:
            progress = latest_progress(kubectl("-n", namespace, "logs", leader, "-c", "worker", "--tail=200"))
            # the launcher warns before the rendezvous: at the head of the log
            warnings = launcher_warnings(kubectl("-n", namespace, "logs", leader, "-c", "worker",
                                                 "--limit-bytes=65536"))
        except KubectlError:
            pass  # not started yet, or its logs are gone: the pod line says why
    events = pending_events(namespace, pods)
    live = live_metrics(namespace, leaders[-1]) if leaders else None
    return job_state(job, pods, describe(job, pods, progress, warnings=warnings, events=events,
                                         kueue=kueue_says(job), live=live, reporter=reporter, groups=groups))


def stage_state(namespace: str, name: str) -> JobState | None:
    """The state of Job NAME's stage Job, which runs before NAME is applied (./run.sh applies it once the stage Job
    completes); None where there is none. Its completion ends no wait (the training Job comes next), its failure
    does (./run.sh then applies nothing more)."""
    stage = stage_job_name(name)
    try:
        state = read_state(namespace, stage, staged=False)
    except JobGone:
        return None
    lines = [f"Job {namespace}/{name} is applied once Job {stage} has staged the model and data "
             "(initializer.separate_job):", *state.lines]
    return JobState(lines, state.change, 1 if state.exit_code == 1 else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m status_views.kubernetes", description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("name")
    parser.add_argument("--wait", action="store_true", help="poll until the Job ends: exit 0 Complete, 1 Failed")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between polls (--wait)")
    args = parser.parse_args(argv)
    try:
        if args.wait:
            return follow(lambda: read_state(args.namespace, args.name), args.interval,
                          lambda line: print(line, file=sys.stderr, flush=True), f"Job {args.namespace}/{args.name}")
        print("\n".join(read_state(args.namespace, args.name).lines))
    except ViewError as error:
        print(f"run.sh: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def metrics_port(pod: dict) -> int | None:
    """The port of the pod's container port named metrics (the render's, with values metrics), if it has one."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME and port.get("containerPort"):
                return int(port["containerPort"])
    return None


def live_metrics(namespace: str, pod: dict) -> str | None:
    """Index 0's live metrics through the API server's pod proxy (no port-forward, no route to the pod needed;
    RBAC: get pods/proxy), as one line; None where the pod serves none, is not running, or the proxy is not
    allowed: the progress line from the log stands alone then."""
    port = metrics_port(pod)
    if port is None or (pod.get("status") or {}).get("phase") != "Running":
        return None
    try:
        text = kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}:{port}"
                                       f"/proxy{PATH}", "--request-timeout=5s")
    except KubectlError:
        return None
    return summary(parse(text))


def _items(*args: str) -> list[dict]:
    """kubectl get's items, or none where the cluster cannot say (no such kind, no permission)."""
    try:
        return json.loads(kubectl(*args, "-o", "json")).get("items") or []
    except (KubectlError, ValueError, AttributeError):
        return []


def pending_events(namespace: str, pods: list[dict]) -> list[dict]:
    """The warning events of the namespace's pods (the scheduler's FailedScheduling, the kubelet's FailedMount),
    read only where a pod is Pending."""
    if not any((pod.get("status") or {}).get("phase") == "Pending" for pod in pods):
        return []
    return _items("-n", namespace, "get", "events", "--field-selector", "involvedObject.kind=Pod,type=Warning")


def kueue_says(job: dict) -> str:
    """Why Kueue has not admitted a suspended Job yet: its Workload's QuotaReserved (or Admitted) message."""
    meta = job["metadata"]
    if not (job.get("spec") or {}).get("suspend") or KUEUE_QUEUE_LABEL not in (meta.get("labels") or {}):
        return ""
    for workload in _items("-n", meta.get("namespace", "default"), "get", "workloads.kueue.x-k8s.io"):
        if any(owner.get("uid") == meta.get("uid") for owner in workload["metadata"].get("ownerReferences") or []):
            conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
            for kind in ("QuotaReserved", "Admitted"):
                if conditions.get(kind, {}).get("status") == "False" and conditions[kind].get("message"):
                    return str(conditions[kind]["message"])
    return ""


if __name__ == "__main__":
    sys.exit(main())
