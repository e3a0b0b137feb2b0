"""local-job against the real Job controller: each scenario of scenarios.py runs under both, and both report the
same conditions (in order, with the controller's reasons and messages), failed, succeeded, failedIndexes and
completedIndexes, and the scenario's expectation. Skipped without $KUBE_ASSETS (see cluster.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, OUTSIDE
from tests.controlplane.scenarios import PLAN_VALUES, SCENARIOS, Scenario, comparable
from tests.rendering import gen_manifests

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]
PLAN_SCRIPT = Path(__file__).resolve().parent / "plan.py"
JOB_CONTROLLER_BACKOFF = 10.0  # the controller's first back-off; local-job runs with the same


def render(scenario: Scenario, namespace: str = "default") -> str:
    stream = gen_manifests(*PLAN_VALUES, *scenario.sets, f"config_map.PLAN={json.dumps(json.dumps(scenario.plan))}",
                           namespace=namespace).decode()
    if scenario.replica_groups_failing is None:
        return stream
    documents = list(yaml.safe_load_all(stream))
    for document in documents:
        if document and document["kind"] == "Job":
            as_replica_groups(document["spec"], scenario.replica_groups_failing)
    return yaml.safe_dump_all(documents, sort_keys=False)


def as_replica_groups(spec: dict, failing: int) -> None:
    """A gang's Job spec made as the replica groups' render makes theirs: the same policies (FailIndex on 80 after
    FailJob, successPolicy succeededCount 1, ``failing`` indexes allowed to fail) and each pod a gang of its own (no
    torchrun exit barrier waits for another pod; REPLICA_GROUPS tells the launcher so)."""
    rules = spec["podFailurePolicy"]["rules"]
    rules[0]["onExitCodes"]["values"].remove(80)
    rules.insert(1, {"action": "FailIndex", "onExitCodes": {"containerName": "worker", "operator": "In",
                                                            "values": [80]}})
    spec.update(successPolicy={"rules": [{"succeededCount": 1}]}, maxFailedIndexes=failing)
    worker = next(c for c in spec["template"]["spec"]["containers"] if c["name"] == "worker")
    worker["args"] = ["--standalone"] + [arg for arg in worker["args"] if not arg.startswith(
        ("--nnodes=", "--node-rank=", "--master-addr=", "--master-port="))]
    worker["env"] = [*worker.get("env", []), {"name": "REPLICA_GROUPS", "value": str(spec["completions"])},
                     {"name": "REPLICA_GROUP", "value": "$(JOB_COMPLETION_INDEX)"}]


def run_on_local_job(scenario: Scenario, tmp_path: Path) -> tuple[dict, dict[int, list[float]]]:
    """The scenario under local-job; (status, each index's pods' (start, end) times)."""
    manifests = tmp_path / "job.yaml"
    manifests.write_text(render(scenario))
    image = tmp_path / "image"
    image.mkdir()
    shutil.copy(PLAN_SCRIPT, image / "plan.py")
    volume = tmp_path / "volume"
    volume.mkdir()
    result = subprocess.run(
        [str(BIN / "local-job"), str(manifests), "--image-dir", str(image), "--volume-root", str(tmp_path / "root"),
         "--volume", f"mnist-train-data={volume}", "--status-file", str(tmp_path / "status.json"),
         "--backoff-seconds", str(JOB_CONTROLLER_BACKOFF), "--env", f"PLAN_DIR={volume}"],
        capture_output=True, text=True, cwd=OUTSIDE, timeout=300)
    assert (tmp_path / "status.json").exists(), result.stdout[-3000:] + result.stderr[-2000:]
    status = json.loads((tmp_path / "status.json").read_text())
    times: dict[int, list] = {}
    for pod in status["pods"]:
        times.setdefault(pod["index"], []).append((pod["started"], pod["finished"]))
    return status, times


def container_status(state: dict) -> dict:
    return {"name": "worker", "image": "indexed-trainer/worker", "imageID": "", "ready": "running" in state,
            "restartCount": 0, "started": "running" in state, "state": state}


def run_on_the_control_plane(scenario: Scenario, plane, namespace: str, timeout: float = 240) -> tuple[dict, dict]:
    """The scenario on the real Job controller: this loop is every pod's kubelet."""
    plane.kubectl("create", "namespace", namespace)
    plane.kubectl("apply", "--server-side", "-f", "-", stdin=render(scenario, namespace))
    job_name = "mnist-train"
    pods: dict[str, dict] = {}  # uid -> {index, attempt, seen, ended}
    attempts: dict[int, int] = {}
    times: dict[int, list] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = plane.get("-n", namespace, "job", job_name)
        if any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
               for c in job.get("status", {}).get("conditions") or []):
            return job["status"], times
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        for pod in plane.get("-n", namespace, "pods", "-l", f"job-name={job_name}")["items"]:
            uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
            index = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            if uid not in pods:
                pods[uid] = {"index": index, "attempt": attempts.get(index, 0), "seen": now, "ended": False}
                attempts[index] = attempts.get(index, 0) + 1
                times.setdefault(index, []).append([now, None])
            mine = pods[uid]
            if mine["ended"]:  # (not scheduled: the claim has no provisioner here; the Job controller does not care)
                continue
            steps = scenario.plan[index]
            step = steps[min(mine["attempt"], len(steps) - 1)]
            ending = None
            if pod["metadata"].get("deletionTimestamp"):
                ending = 143  # SIGTERM from the kubelet: the plan (and the worker) exit 143
            elif step != "run" and now - mine["seen"] >= step[1]:
                ending = step[0]
            if ending is None:
                if pod["status"].get("phase") != "Running":
                    plane.set_pod_status(namespace, name, {"phase": "Running", "containerStatuses": [
                        container_status({"running": {"startedAt": stamp}})]}, may_be_gone=True)
                continue
            terminated = {"exitCode": ending, "reason": "Completed" if ending == 0 else "Error",
                          "startedAt": stamp, "finishedAt": stamp}
            plane.set_pod_status(namespace, name, {"phase": "Succeeded" if ending == 0 else "Failed",
                                                   "containerStatuses": [container_status({"terminated": terminated})]},
                                 may_be_gone=True)
            mine["ended"] = True
            # the controller's back-off runs from finishedAt, which has a second's resolution: the end it sees
            times[index][mine["attempt"]][1] = float(int(now))
            if pod["metadata"].get("deletionTimestamp"):  # the kubelet's last word: the pod is gone
                plane.kubectl("-n", namespace, "delete", "pod", name, "--grace-period=0", "--force", "--wait=false",
                              check=False)
        time.sleep(0.2)
    raise AssertionError(f"{scenario.name}: the Job did not finish in {timeout} s: {plane.get('-n', namespace, 'job', job_name)}")


def pod_and_log(pod: dict, logs: Path) -> str:
    log = logs / f"{pod['name']}.log"
    tail = log.read_text().splitlines()[-3:] if log.exists() else []
    return f"{pod['name']} (index {pod['index']}): {pod['phase']}, {pod['exit_codes']}\n  " + "\n  ".join(tail)


def pods_and_logs(status: dict, logs: Path) -> str:
    """local-job's pods, each with its exit codes and its log's last lines: what tells a race from a difference."""
    return "\n".join(pod_and_log(pod, logs) for pod in status["pods"])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_local_job_reports_what_the_job_controller_reports(scenario, control_plane, tmp_path):
    namespace = "parity-" + "".join(c if c.isalnum() else "-" for c in scenario.name.lower())[:40].strip("-")
    # both at once: each mostly waits out the same back-offs
    with ThreadPoolExecutor(max_workers=1) as beside:
        local_run = beside.submit(run_on_local_job, scenario, tmp_path)
        real, real_times = run_on_the_control_plane(scenario, control_plane, namespace)
        local, local_times = local_run.result()
    assert comparable(real) == scenario.expected, yaml.safe_dump(real)
    assert comparable(local) == comparable(real), pods_and_logs(local, tmp_path / "root" / "logs")
    # a replacement waits the controller's back-off in both (10 s for an index's first failure)
    for times in (real_times, local_times):
        for pods in times.values():
            for (_, ended), (started, _) in zip(pods, pods[1:]):
                assert JOB_CONTROLLER_BACKOFF - 1 <= started - ended <= JOB_CONTROLLER_BACKOFF + 5, times
