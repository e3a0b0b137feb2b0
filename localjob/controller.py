"""The Job controller, locally: one pod per completion index, replaced on failure as the Job's policy says.

Semantics follow the batch/v1 Job controller: at most ``parallelism`` pods run; a failed pod is matched against
``podFailurePolicy`` (FailJob / Ignore / Count, on its containers' exit codes and on its conditions, such as
the DisruptionTarget an eviction gives it); counted failures beyond ``backoffLimit`` fail the Job
(BackoffLimitExceeded), and with ``backoffLimitPerIndex`` an index beyond its own limit is failed (beyond
``maxFailedIndexes`` of them: MaxFailedIndexesExceeded). A replacement waits the controller's back-off, 10 s
doubling to at most 6 min: by the number of this index's failures (ignored ones included) with
``backoffLimitPerIndex``, else by the number of the Job's failed pods since its last success, ignored ones
included. It starts only once the failed pod is fully gone (podReplacementPolicy: Failed). A ``successPolicy``
completes the Job once its indexes have succeeded (SuccessCriteriaMet), terminating the pods still running.
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

from localjob import eviction
from localjob.atomic import write_atomically
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
    conditions: list[dict] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0


class LocalPod:
    """Init containers one after the other, then the container; phase Succeeded or Failed at the end."""

    def __init__(self, run: PodRun, controller: JobController, cpus: set[int] | None):
        self.run, self.controller, self.cpus = run, controller, cpus
        self.record = PodRecord(run.name, run.index, phase="Running", started=time.time())
        self.queue = list(run.init_containers) + [run.container]
        self.evicted = False
        self.current = self._start_next()

    def _start_next(self) -> ContainerProcess:
        container = self.queue.pop(0)
        label = self.run.name if not self.queue else f"{self.run.name}/{container.name}"
        log = self.controller.root / "logs" / f"{self.run.name}.log"
        return ContainerProcess(container, self.run.uid, label, log, self.controller.emit, self.cpus)

    def step(self) -> bool:
        """Advance; True once the pod has finished (every process gone)."""
        code = self.current.poll()
        if code is None:
            return False
        code = ContainerProcess.exit_code(code)
        self.record.exit_codes[self.current.run.name] = code
        if code == 0 and self.queue and not self.evicted:
            self.current = self._start_next()
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

    def evict(self, grace: float, reason: str) -> None:
        """As the Eviction API or a preemption: the DisruptionTarget condition, then termination with the grace
        period, in the background (the controller goes on watching every pod meanwhile)."""
        self.evicted = True
        self.record.conditions.append({"type": "DisruptionTarget", "status": "True", "reason": reason})
        threading.Thread(target=self.current.terminate, args=(grace,), daemon=True).start()


def parse_indexes(text: str) -> set[int]:
    """A successPolicy's succeededIndexes ("0", "1,3-5") as a set."""
    indexes: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        indexes.update(range(int(first), int(last or first) + 1))
    return indexes


def backoff_delay(base: float, failures: int) -> float:
    """The Job controller's delay before a replacement: base, doubled per further failure, capped at 6 min."""
    return 0.0 if failures <= 0 else min(base * 2 ** (failures - 1), BACKOFF_CAP)


class JobController:
    def __init__(self, plan: JobPlan, factory: PodFactory, root: Path, backoff_seconds: float = 10.0,
                 emit=None):
        self.plan, self.factory, self.root, self.backoff_seconds = plan, factory, root, backoff_seconds
        self.lock = threading.Lock()
        self.emit = emit or self._print
        self.records: list[PodRecord] = []
        self.failed = 0  # failed pods counted against backoffLimit (what .status.failed counts)
        self.ignored = 0  # failed pods a podFailurePolicy Ignore rule matched
        self.index_failures = {index: 0 for index in range(plan.completions)}  # counted, per index
        self.index_absolute = {index: 0 for index in range(plan.completions)}  # counted + ignored, per index
        self.restarts = {index: 0 for index in range(plan.completions)}  # replacements created, per index
        self.failures_since_success = 0  # the job-wide back-off's count: every failed pod, ignored included
        self.last_failure_of: dict[int | None, float] = {}  # per index, and None: the Job's last failure
        self.succeeded: set[int] = set()
        self.failed_indexes: set[int] = set()
        self.conditions: list[dict] = []
        self.interrupted: str | None = None

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
            if self._matches(rule, record):
                return rule["action"]
        return "Count"

    @staticmethod
    def _matches(rule: dict, record: PodRecord) -> bool:
        on_conditions = rule.get("onPodConditions")
        if on_conditions:
            return any(condition["type"] == wanted["type"] and condition["status"] == wanted.get("status", "True")
                       for wanted in on_conditions for condition in record.conditions)
        on_codes = rule.get("onExitCodes") or {}
        codes = [code for name, code in record.exit_codes.items()
                 if code != 0 and on_codes.get("containerName") in (None, name)]
        values = set(on_codes.get("values", []))
        if on_codes.get("operator") == "In":
            return any(code in values for code in codes)
        return any(code not in values for code in codes)

    def success_met(self) -> str | None:
        """The message of the first successPolicy rule the succeeded indexes meet, or None."""
        for number, rule in enumerate((self.plan.spec.get("successPolicy") or {}).get("rules", [])):
            wanted = parse_indexes(rule["succeededIndexes"]) if "succeededIndexes" in rule else None
            done = self.succeeded & wanted if wanted is not None else self.succeeded
            if wanted is not None and "succeededCount" not in rule and done != wanted:
                continue
            if len(done) >= int(rule.get("succeededCount", 0)):
                return f"Matched rules at index {number}"
        return None

    def cpus_for(self, index: int, cpu_limit: int) -> set[int] | None:
        """A pod's CPU limit as a share of this machine's cores, so that pods side by side do not oversubscribe."""
        cores = machine_cores()
        share = max(1, min(cpu_limit, len(cores) // self.plan.parallelism))
        if share >= len(cores):
            return None
        start = (index * share) % len(cores)
        return {cores[(start + k) % len(cores)] for k in range(share)}

    def ready_at(self, index: int) -> float:
        """When the controller may create index's next pod (time.monotonic()): the back-off after a failure."""
        if "backoffLimitPerIndex" in self.plan.spec:
            return self.last_failure_of.get(index, 0.0) + backoff_delay(self.backoff_seconds, self.index_absolute[index])
        return self.last_failure_of.get(None, 0.0) + backoff_delay(self.backoff_seconds, self.failures_since_success)

    # -- the loop -----------------------------------------------------------------------------------
    def run(self) -> tuple[bool, str, str]:
        """Run the Job to its end; (complete, reason, message)."""
        self.control = eviction.ControlDirectory(self.root)
        self.control.open()
        try:
            return self._run()
        finally:
            self.control.close()

    def _run(self) -> tuple[bool, str, str]:
        plan = self.plan
        started = time.monotonic()
        deadline = plan.spec.get("activeDeadlineSeconds")
        per_index_limit = plan.spec.get("backoffLimitPerIndex")
        running: dict[int, LocalPod] = {}
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
            self._serve_evictions(running)
            for index, pod in list(running.items()):
                if not pod.step():
                    continue
                del running[index]
                self.factory.release(pod.run)
                record = pod.record
                if record.phase == "Succeeded":
                    self.succeeded.add(index)
                    self.failures_since_success = 0
                    continue
                action = self.policy_action(record)
                conditions = "".join(f", {c['type']}" for c in record.conditions)
                self.note(f"pod {record.name} failed (exit codes {record.exit_codes}{conditions}); "
                          f"podFailurePolicy: {action}")
                if action == "FailJob":
                    self._end(running, "podFailurePolicy FailJob")
                    return False, "PodFailurePolicy", (
                        f"container exit codes {record.exit_codes} of pod {record.name} matched a FailJob rule")
                now = time.monotonic()
                self.failures_since_success += 1
                self.index_absolute[index] += 1
                self.last_failure_of[None] = self.last_failure_of[index] = now
                if action == "Ignore":
                    self.ignored += 1
                    pending.append(index)
                    continue
                self.failed += 1
                self.index_failures[index] += 1
                if self.failed > plan.backoff_limit:
                    self._end(running, "the backoff limit was exceeded")
                    return False, "BackoffLimitExceeded", (
                        f"Job has reached the specified backoff limit ({plan.backoff_limit} counted failures "
                        "allowed)")
                if per_index_limit is not None and self.index_failures[index] > int(per_index_limit):
                    self.failed_indexes.add(index)
                    if len(self.failed_indexes) > int(plan.spec.get("maxFailedIndexes", plan.completions)):
                        self._end(running, "too many failed indexes")
                        return False, "MaxFailedIndexesExceeded", f"failed indexes: {sorted(self.failed_indexes)}"
                    continue
                pending.append(index)
            met = self.success_met() if "successPolicy" in plan.spec else None
            if met:
                self.conditions.append({"type": "SuccessCriteriaMet", "reason": "SuccessPolicy", "message": met})
                self._end(running, f"SuccessCriteriaMet ({met})")
                return True, "SuccessPolicy", met
            if len(self.succeeded) == plan.completions:
                return True, "Completed", f"all {plan.completions} indexes succeeded"
            if self.failed_indexes and not running and not pending:
                return False, "FailedIndexes", f"failed indexes: {sorted(self.failed_indexes)}"
            now = time.monotonic()
            for index in sorted(pending):
                if len(running) >= plan.parallelism or now < self.ready_at(index):
                    continue
                pending.remove(index)
                if self.index_absolute[index]:
                    self.restarts[index] += 1
                run = self.factory.pod(index)
                pod = LocalPod(run, self, self.cpus_for(index, run.cpu_limit))
                self.records.append(pod.record)
                running[index] = pod
                self.note(f"started pod {run.name} (index {index}"
                          + (f", attempt {self.index_absolute[index] + 1})" if self.index_absolute[index] else ")"))
            time.sleep(0.05)

    def _serve_evictions(self, running: dict[int, LocalPod]) -> None:
        for index in self.control.eviction_requests():
            pod = running.get(index)
            if pod is None or pod.evicted:
                self.control.answer(index, False, f"no running pod with index {index}")
                continue
            self.note(f"evicting pod {pod.record.name}: condition DisruptionTarget, SIGTERM with its grace "
                      f"period ({self.plan.grace_seconds:g} s)")
            pod.evict(self.plan.grace_seconds, "EvictionByEvictionAPI")
            self.control.answer(index, True, f"pod {pod.record.name} evicted")

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
        for pod in running.values():
            self.factory.release(pod.run)
        running.clear()

    def status(self, complete: bool, reason: str, message: str) -> dict:
        final = {"type": "Complete" if complete else "Failed", "reason": reason, "message": message}
        return {
            "name": self.plan.name,
            "condition": final,
            "conditions": self.conditions + [final],
            "succeeded": len(self.succeeded),
            "failed": self.failed,
            "ignored": self.ignored,
            "failedIndexes": sorted(self.failed_indexes),
            "restarts": {str(index): count for index, count in self.restarts.items()},
            "pods": [vars(record) for record in self.records],
        }

    def write_status(self, path: Path, status: dict) -> None:
        write_atomically(path, json.dumps(status, indent=2) + "\n")
