"""`local-job status`: a local run as `./run.sh --status` shows a Job on a cluster, in the same lines.

The running local-job publishes its status in its volume root (VOLUME_ROOT/status.json) as it changes; this
reads it, and each pod's log there, into the Job and pod objects kubectl would return, and prints them with the
cluster view's own describe(): the Job's state, a line per index and pod (exit codes and what they mean), index
0's latest progress line (with its ETA), its live metrics while it serves them, the launcher's warnings and
the last error. A status whose local-job is
gone (killed, the machine restarted) says so instead of showing a Job that runs forever.

    local-job status --volume-root runs/mnist-train
    local-job status build/                # the Job's default volume root, as local-job build/ used it
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from localjob.eviction import running_controller
from localjob.records import LIVE_STATUS, api_time
from status_views.kubernetes import (
    describe,
    job_state,
    latest_progress,
    launcher_warnings,
    pods_by_index,
    reporting_index,
    telling_container,
)
from status_views.view import JobGone, JobState
from trainer_contract.metrics import PATH, PORT_NAME, parse, summary
from trainer_contract.names import INDEX_LABEL, WORKER_CONTAINER


class NoStatus(JobGone):
    """No local run there (or one an older local-job wrote): nothing to show or wait for."""


def _stamp(seconds: float | None) -> str | None:
    if not seconds:
        return None
    return api_time(seconds)


def pod_log(root: Path, pod: str) -> str:
    """A pod's log as kubectl logs shows it (local-job stamps each line with its time, as --timestamps does)."""
    try:
        text = (root / "logs" / f"{pod}.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(line.split(" ", 1)[1] if line[:4].isdigit() and " " in line else line
                     for line in text.splitlines())


# What the kubelet's FallbackToLogsOnError keeps of a failed container's log: its last 80 lines, at most 2048 bytes.
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048


def termination_message(log: str) -> str:
    """A failed pod's termination message, as a kubelet gives it: the launcher's last word (the message it writes),
    else the log's tail (FallbackToLogsOnError)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("launcher: ")]
    if said:
        return said[-1]
    return "\n".join(lines[-FALLBACK_LINES:]).encode()[-FALLBACK_BYTES:].decode(errors="ignore")


def as_objects(status: dict, root: Path, alive: bool) -> tuple[dict, list[dict]]:
    """The Job and its pods as the API would return them."""
    records = status.get("pods") or []
    conditions = list(status.get("conditions") or [])
    if not conditions and not alive:
        conditions = [{"type": "Stopped", "status": "True", "reason": "LocalJobGone",
                       "message": f"the local-job (pid {status['localJob']['pid']}) ended before the Job did; run "
                                  "it again to go on (a killed pod's work resumes from its checkpoints)"}]
    job = {"metadata": {"name": status["name"], "namespace": status.get("namespace", "default")},
           "spec": {"completions": status["completions"], "backoffLimit": status["backoffLimit"],
                    **({"maxFailedIndexes": status["maxFailedIndexes"]}
                       if status.get("maxFailedIndexes") is not None else {})},
           "status": {"conditions": conditions, "succeeded": status.get("succeeded", 0),
                      "failed": status.get("failed", 0),
                      **{key: status[key] for key in ("completedIndexes", "failedIndexes") if status.get(key)},
                      "active": sum(1 for r in records if r["phase"] == "Running") if alive else 0}}
    return job, [pod_object(record, root, alive) for record in records]


def pod_object(record: dict, root: Path, alive: bool) -> dict:
    """One pod record as the API returns the pod: the init containers that ran (check-config, stage) with their exit
    codes, and the worker's state; after an init container's failure the worker waits in PodInitializing, as a
    kubelet reports it. A failure's message is what a kubelet would keep (termination_message)."""
    codes = dict(record.get("exit_codes") or {})

    def ended(code: int) -> dict:
        message = termination_message(pod_log(root, record["name"])) if code else ""
        return {"terminated": {"exitCode": code, "message": message, "startedAt": _stamp(record["started"]),
                               "finishedAt": _stamp(record.get("finished"))}}
    init = [{"name": name, "state": ended(code)} for name, code in codes.items() if name != WORKER_CONTAINER]
    if record["phase"] == "Running" and alive:
        state: dict = {"running": {"startedAt": _stamp(record["started"])}}
    elif WORKER_CONTAINER in codes:
        state = ended(codes[WORKER_CONTAINER])
    elif any(status["state"]["terminated"]["exitCode"] for status in init):
        state = {"waiting": {"reason": "PodInitializing"}}
    else:
        state = {"waiting": {"reason": "LocalJobGone" if not alive else "ContainerCreating"}}
    return {"metadata": {"name": record["name"], "creationTimestamp": _stamp(record["started"]),
                         "labels": {INDEX_LABEL: str(record["index"])}},
            "status": {"phase": record["phase"], "initContainerStatuses": init,
                       "containerStatuses": [{"name": WORKER_CONTAINER, "state": state}]}}


def read_status(root: Path) -> dict:
    path = root / LIVE_STATUS
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise NoStatus(f"no local run in {root} (no {LIVE_STATUS}): start one with local-job, or name its "
                       "--volume-root") from None
    except (OSError, ValueError) as exc:
        raise NoStatus(f"{path} is unreadable: {exc}") from None


def read_state(root: Path, now: datetime | None = None) -> JobState:
    """The local run in ``root`` as every engine's view has it (status_views/view.py): the cluster view's lines, what
    a wait reports a change of, and the exit code once the Job has ended (1 as well when its local-job is gone
    before it did: nothing will move it on)."""
    status = read_status(root)
    if "localJob" not in status:
        raise NoStatus(f"{root / LIVE_STATUS} was written by an older local-job; run the Job again to see its status")
    alive = status["condition"] is None and running_controller(root) == status["localJob"]["pid"]
    job, pods = as_objects(status, root, alive)
    groups = bool(status.get("replicaGroups"))
    reporter = reporting_index(pods, groups)
    leaders = pods_by_index(pods).get(reporter, [])
    # the worker's log (kubectl logs -c worker): none where an init container failed and the worker never ran
    worker_ran = leaders and not telling_container(leaders[-1])[0]
    log = pod_log(root, leaders[-1]["metadata"]["name"]) if worker_ran else ""
    warnings = [text for name in sorted({pod["metadata"]["name"] for pod in pods})
                for text in launcher_warnings(pod_log(root, name))]
    unique = list(dict.fromkeys(warnings))
    lines = describe(job, pods, latest_progress(log), now, warnings=unique, live=live_metrics(status, alive, reporter),
                     reporter=reporter, groups=groups)
    state = job_state(job, pods, [*lines, f"pod logs: {root / 'logs'}/"])
    return state if alive or state.exit_code is not None else replace(state, exit_code=1)


def live_metrics(status: dict, alive: bool, index: int = 0, timeout: float = 2.0) -> str | None:
    """Index ``index``'s live metrics, scraped from the port local-job gave its pod (the container's port named
    metrics), as one line; None when it serves none (not started, ended, metrics off)."""
    running = [record for record in status.get("pods") or []
               if record["index"] == index and record["phase"] == "Running" and (record.get("ports") or {}).get(PORT_NAME)]
    if not alive or not running:
        return None
    url = f"http://127.0.0.1:{running[-1]['ports'][PORT_NAME]}{PATH}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310  # our own pod, on this machine
            return summary(parse(answer.read(1 << 20).decode("utf-8", errors="replace")))
    except (OSError, ValueError):
        return None  # not serving yet (the rendezvous), or already gone
