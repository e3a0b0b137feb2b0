"""`./run.sh --status`: the Job on the cluster as a person asks about it. Its conditions, each completion index's
pods with their exit codes and what each code means (trainer_contract/exit_codes.py) and termination message, and the
latest progress line of index 0 (rank 0). Reads with kubectl; torch-free.

    python -m generator.status NAMESPACE JOB
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

from trainer_contract import exit_codes
from trainer_contract.exit_codes import meaning
from trainer_contract.launcher import LAUNCHER_WARNING
from trainer_contract.progress import format_duration

INDEX_LABEL = "batch.kubernetes.io/job-completion-index"  # set by the Job controller on every pod
JOB_LABEL = "batch.kubernetes.io/job-name"


class KubectlError(Exception):
    pass


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def pod_line(pod: dict, now: datetime) -> str:
    """One pod: its name, phase, how long it has run or how it ended (exit code, meaning, message)."""
    name, status = pod["metadata"]["name"], pod.get("status") or {}
    phase = status.get("phase", "Unknown")
    container: dict = next(iter(status.get("containerStatuses") or []), {})
    state = container.get("state") or {}
    if "terminated" in state:
        ended = state["terminated"]
        code = ended.get("exitCode")
        began, finished = _parse_time(ended.get("startedAt")), _parse_time(ended.get("finishedAt"))
        took = f" after {format_duration((finished - began).total_seconds())}" if began and finished else ""
        line = f"{name} {phase}, exit {code}" + (f" ({meaning(code)})" if code else "") + took
        message = (ended.get("message") or "").strip().splitlines()
        return line + (f": {message[-1]}" if message else "")
    if "running" in state:
        started = _parse_time(state["running"].get("startedAt"))
        return f"{name} {phase}" + (f" for {format_duration((now - started).total_seconds())}" if started else "")
    waiting = (state.get("waiting") or {}).get("reason")
    return f"{name} {phase}" + (f" ({waiting})" if waiting else "")


def last_error(pods: list[dict]) -> str | None:
    """The failure a person asks about first: the pod that ended last with a non-zero exit code, a root cause
    before a victim (75: a peer failed first; 143: stopped once the Job ended), with the code's meaning and its
    message (the launcher's termination message, or the log's tail)."""
    failed = []
    for pod in pods:
        container: dict = next(iter((pod.get("status") or {}).get("containerStatuses") or []), {})
        ended = (container.get("state") or {}).get("terminated")
        if ended and ended.get("exitCode"):
            cause = ended["exitCode"] not in exit_codes.codes_taking("free", "stop")  # not a victim
            failed.append((cause, ended.get("finishedAt") or pod["metadata"].get("creationTimestamp") or "", pod,
                           ended))
    if not failed:
        return None
    _, _, pod, ended = max(failed, key=lambda item: item[:2])
    message = (ended.get("message") or "").strip().splitlines()
    return (f"{pod['metadata']['name']} exit {ended['exitCode']} ({meaning(ended['exitCode'])})"
            + (f": {message[-1]}" if message else ""))


def describe(job: dict, pods: list[dict], progress: str | None, now: datetime | None = None,
             warnings: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The Job, a line per index and pod, index 0's latest progress, the launcher's warnings and the last error."""
    now = now or datetime.now(timezone.utc)
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    state = conditions[-1]["type"] if conditions else ("Suspended" if spec.get("suspend") else "Running")
    lines = [f"Job {meta.get('namespace', 'default')}/{meta['name']}: {state}; {status.get('active', 0)} active, "
             f"{status.get('succeeded', 0)} succeeded, {status.get('failed', 0)} failed (backoffLimit "
             f"{spec.get('backoffLimit', 6)})"]
    lines += [f"  {c['type']}: {c.get('reason', '')}: {c.get('message', '')}" for c in conditions]
    by_index: dict[int, list[dict]] = {}
    for pod in pods:
        index = (pod["metadata"].get("labels") or {}).get(INDEX_LABEL)
        if index is not None:
            by_index.setdefault(int(index), []).append(pod)
    for index in range(int(spec.get("completions") or 0)):
        found = sorted(by_index.get(index, []), key=lambda p: p["metadata"].get("creationTimestamp", ""))
        if not found:
            lines.append(f"index {index}: no pod")
        for number, pod in enumerate(found):
            lines.append(("index " + str(index) + ": " if number == 0 else " " * (len(str(index)) + 8))
                         + pod_line(pod, now))
    if progress:
        lines.append(f"index 0's latest progress: {progress}")
    lines += [f"warning: {warning}" for warning in warnings]
    error = last_error(pods)
    if error:
        lines.append(f"last error: {error}")
    return lines


def latest_progress(log: str) -> str | None:
    """The built-in worker's latest epoch or batch line of rank 0, else the log's last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    progress = [line for line in lines if line.startswith("Rank 0: epoch")]
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


def main(argv: list[str] | None = None) -> int:
    namespace, name = (argv if argv is not None else sys.argv[1:])[:2]
    try:
        job = json.loads(kubectl("-n", namespace, "get", "job", name, "-o", "json"))
        pods = json.loads(kubectl("-n", namespace, "get", "pods", "-l", f"{JOB_LABEL}={name}", "-o", "json"))["items"]
    except KubectlError as error:
        print(f"run.sh: error: {error}", file=sys.stderr)
        return 1
    leaders = sorted((p for p in pods if (p["metadata"].get("labels") or {}).get(INDEX_LABEL) == "0"),
                     key=lambda p: p["metadata"].get("creationTimestamp", ""))
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
    print("\n".join(describe(job, pods, progress, warnings=warnings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
