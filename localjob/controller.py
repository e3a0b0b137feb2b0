"""The Job controller, locally: one pod per completion index, replaced on failure as the Job's policy says.

Semantics follow the batch/v1 Job: at most ``parallelism`` pods run; a failed pod is matched against
``podFailurePolicy`` (FailJob / Ignore / Count, on exit codes of its containers), counted failures beyond
``backoffLimit`` (or ``backoffLimitPerIndex``) fail the Job, replacements wait an exponential back-off per
index, a replacement starts only once the failed pod is fully gone (podReplacementPolicy: Failed), and
``activeDeadlineSeconds`` fails the Job. Ending the Job terminates its pods with their grace period.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from localjob.manifests import JobPlan
from localjob.podspec import PodFactory, PodRun, machine_cores
from localjob.processes import ContainerProcess

BACKOFF_CAP = 360.0  # seconds, as the Job controller caps it


@dataclass
class PodRecord:
    name: str
    index: int
    phase: str = "Pending"
    exit_codes: dict[str, int] = field(default_factory=dict)
    started: float = 0.0
    finished: float = 0.0


class LocalPod:
    """Init containers one after the other, then the container; phase Succeeded or Failed at the end."""

    def __init__(self, run: PodRun, controller: "JobController", cpus: set[int] | None):
        self.run, self.controller, self.cpus = run, controller, cpus
        self.record = PodRecord(run.name, run.index, phase="Running", started=time.time())
        self.queue = list(run.init_containers) + [run.container]
        self.current: ContainerProcess | None = None
        self._start_next()

    def _start_next(self) -> None:
        container = self.queue.pop(0)
        label = self.run.name if not self.queue else f"{self.run.name}/{container.name}"
        log = self.controller.root / "logs" / f"{self.run.name}.log"
        self.current = ContainerProcess(container, self.run.uid, label, log, self.controller.emit, self.cpus)

    def step(self) -> bool:
        """Advance; True once the pod has finished (every process gone)."""
        code = self.current.poll()
        if code is None:
            return False
        code = ContainerProcess.exit_code(code)
        self.record.exit_codes[self.current.run.name] = code
        if code == 0 and self.queue:
            self._start_next()
            return False
        self.record.phase = "Succeeded" if code == 0 else "Failed"
        self.record.finished = time.time()
        return True

    def terminate(self, grace: float) -> None:
        self.current.terminate(grace)
        if self.record.phase == "Running":
            self.record.phase = "Failed"
            self.record.exit_codes.setdefault(self.current.run.name, 137)
            self.record.finished = time.time()


class JobController:
    def __init__(self, plan: JobPlan, factory: PodFactory, root: Path, backoff_seconds: float = 10.0,
                 emit=None):
        self.plan, self.factory, self.root, self.backoff_seconds = plan, factory, root, backoff_seconds
        self.lock = threading.Lock()
        self.emit = emit or self._print
        self.records: list[PodRecord] = []
        self.failed = 0
        self.index_failures = {index: 0 for index in range(plan.completions)}
        self.succeeded: set[int] = set()
        self.failed_indexes: set[int] = set()
        self.interrupted = None

    def _print(self, line: str) -> None:
        with self.lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def note(self, message: str) -> None:
        self.emit(f"local-job: {message}")

    # -- policy -------------------------------------------------------------------------------------
    def policy_action(self, record: PodRecord) -> str:
        """The first podFailurePolicy rule that matches the failed pod, as the Job controller evaluates it."""
        for rule in (self.plan.spec.get("podFailurePolicy") or {}).get("rules", []):
            on_codes = rule.get("onExitCodes")
            if not on_codes:
                continue  # onPodConditions: a local pod has no disruption conditions
            codes = [code for name, code in record.exit_codes.items()
                     if code != 0 and on_codes.get("containerName") in (None, name)]
            values = set(on_codes["values"])
            matched = any(code in values for code in codes) if on_codes["operator"] == "In" else any(
                code not in values for code in codes)
            if matched:
                return rule["action"]
        return "Count"

    def cpus_for(self, index: int, cpu_limit: int) -> set[int] | None:
        """A pod's CPU limit as a share of this machine's cores, so that pods side by side do not oversubscribe."""
        cores = machine_cores()
        share = max(1, min(cpu_limit, len(cores) // self.plan.parallelism))
        if share >= len(cores):
            return None
        start = (index * share) % len(cores)
        return {cores[(start + k) % len(cores)] for k in range(share)}

    # -- the loop -----------------------------------------------------------------------------------
    def run(self) -> tuple[bool, str, str]:
        """Run the Job to its end; (complete, reason, message)."""
        plan = self.plan
        started = time.monotonic()
        deadline = plan.spec.get("activeDeadlineSeconds")
        running: dict[int, LocalPod] = {}
        not_before = {index: 0.0 for index in range(plan.completions)}
        pending = list(range(plan.completions))
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._interrupt)
        if plan.spec.get("suspend"):
            self.note("the Job is suspended (spec.suspend: a queue such as Kueue would admit it); running it now")
        while True:
            if self.interrupted is not None:
                self._end(running, f"received signal {self.interrupted}")
                return False, "Interrupted", f"local-job received signal {self.interrupted}"
            if deadline is not None and time.monotonic() - started > float(deadline):
                self._end(running, "the active deadline passed")
                return False, "DeadlineExceeded", f"Job was active longer than specified deadline ({deadline} s)"
            for index, pod in list(running.items()):
                if not pod.step():
                    continue
                del running[index]
                record = pod.record
                if record.phase == "Succeeded":
                    self.succeeded.add(index)
                    continue
                action = self.policy_action(record)
                self.note(f"pod {record.name} failed (exit codes {record.exit_codes}); podFailurePolicy: {action}")
                if action == "FailJob":
                    self._end(running, "podFailurePolicy FailJob")
                    return False, "PodFailurePolicy", (
                        f"container exit codes {record.exit_codes} of pod {record.name} matched a FailJob rule")
                if action == "Ignore":
                    pending.append(index)
                    continue
                self.failed += 1
                self.index_failures[index] += 1
                per_index = plan.spec.get("backoffLimitPerIndex")
                if per_index is not None and self.index_failures[index] > int(per_index):
                    self.failed_indexes.add(index)
                    if len(self.failed_indexes) > int(plan.spec.get("maxFailedIndexes", plan.completions)):
                        self._end(running, "too many failed indexes")
                        return False, "MaxFailedIndexesExceeded", f"failed indexes: {sorted(self.failed_indexes)}"
                elif self.failed > plan.backoff_limit:
                    self._end(running, "the backoff limit was exceeded")
                    return False, "BackoffLimitExceeded", (
                        f"Job has reached the specified backoff limit ({plan.backoff_limit} failed pods allowed)")
                else:
                    delay = min(self.backoff_seconds * 2 ** (self.index_failures[index] - 1), BACKOFF_CAP)
                    not_before[index] = time.monotonic() + delay
                    pending.append(index)
            if len(self.succeeded) == plan.completions:
                return True, "Completed", f"all {plan.completions} indexes succeeded"
            if self.failed_indexes and not running and not pending:
                return False, "FailedIndexes", f"failed indexes: {sorted(self.failed_indexes)}"
            now = time.monotonic()
            for index in sorted(pending):
                if len(running) >= plan.parallelism or now < not_before[index] or index in self.failed_indexes:
                    continue
                pending.remove(index)
                run = self.factory.pod(index)
                pod = LocalPod(run, self, self.cpus_for(index, run.cpu_limit))
                self.records.append(pod.record)
                running[index] = pod
                self.note(f"started pod {run.name} (index {index}"
                          + (f", attempt {self.index_failures[index] + 1})" if self.index_failures[index] else ")"))
            time.sleep(0.05)

    def _interrupt(self, signum, frame) -> None:
        self.interrupted = signal.Signals(signum).name

    def _end(self, running: dict[int, LocalPod], why: str) -> None:
        if running:
            self.note(f"{why}: terminating {len(running)} running pod(s) "
                      f"(grace period {self.plan.grace_seconds:g} s)")
        threads = [threading.Thread(target=pod.terminate, args=(self.plan.grace_seconds,)) for pod in running.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        running.clear()

    def status(self, complete: bool, reason: str, message: str) -> dict:
        return {
            "name": self.plan.name,
            "condition": {"type": "Complete" if complete else "Failed", "reason": reason, "message": message},
            "succeeded": len(self.succeeded),
            "failed": sum(1 for r in self.records if r.phase == "Failed"),
            "restarts": {str(index): count for index, count in self.index_failures.items()},
            "pods": [vars(record) for record in self.records],
        }

    def write_status(self, path: Path, status: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(status, indent=2) + "\n")
