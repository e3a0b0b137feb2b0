"""The Job controller, locally: one pod per completion index, replaced on failure as the Job's policy says.

Semantics follow the batch/v1 Job controller: at most ``parallelism`` pods run; a failed pod is matched against
``podFailurePolicy`` (FailJob / Ignore / Count, on its containers' exit codes and on its conditions, such as
the DisruptionTarget an eviction gives it); counted failures beyond ``backoffLimit`` fail the Job
(BackoffLimitExceeded), and with ``backoffLimitPerIndex`` an index beyond its own limit is failed (beyond
``maxFailedIndexes`` of them: MaxFailedIndexesExceeded). A replacement waits the controller's back-off, 10 s
doubling to at most 10 min: by the number of this index's failures (ignored ones included) with
``backoffLimitPerIndex``, else by the number of the Job's failed pods since its last success, ignored ones
included. It starts only once the failed pod is fully gone (podReplacementPolicy: Failed). A ``successPolicy``
completes the Job once its indexes have succeeded (SuccessCriteriaMet), terminating the pods still running.
``activeDeadlineSeconds`` fails the Job. Ending the Job terminates its pods with their grace period.

Each rule is its own file: failure_policy.py (podFailurePolicy), success_policy.py (successPolicy), backoff.py
(the delay before a replacement) and accounting.py (what counts against which limit, failed indexes, the end
they make); this file is the loop that applies them in the controller's order, and the status it publishes.

The status is the controller's: a failure writes FailureTarget at once and Failed only after the remaining pods
have ended (success: SuccessCriteriaMet, then Complete), each with the controller's reason and message; the pods
the controller terminates because the Job failed count in ``failed`` (a pod an Ignore rule matches as it stands,
such as one already being evicted, does not), and an index past its own limit is in ``failedIndexes`` even when
the Job-wide limit ends the Job in the same step.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from localjob import elastic, eviction, failure_policy, success_policy
from localjob.accounting import Accounting, Ended
from localjob.display import Display
from localjob.manifests import JobPlan
from localjob.podspec import PodFactory, PodRun, machine_cores
from localjob.processes import ContainerProcess
from localjob.records import LIVE_STATUS, PodRecord, api_time
from localjob.success_policy import format_indexes
from trainer_contract.atomic import atomic_write
from trainer_contract.exit_codes import meaning
from trainer_contract.progress import format_duration

# How soon, at the earliest, a pod the controller deletes gets its SIGTERM: the kubelet's relist period (its PLEG),
# by which a pod that ended on its own has reported so.
KUBELET_RELIST_SECONDS = 1.0

# Where local-job's status cannot be the controller's, said in every status it writes (and docs/reliability.md).
DIFFERENCES = (
    "no active, ready or terminating counts and no uncountedTerminatedPods: every pod is listed under pods instead",
    "times are this machine's clock at one-second resolution, taken when local-job sees a pod end (a kubelet "
    "reports a little later)",
    "Interrupted (local-job itself stopped by a signal) has no counterpart: a deleted Job keeps no status",
    "suspend is not honoured: a suspended Job (a Kueue queue's) runs at once",
    "a pod's root is not read-only: a program writing outside its volumes succeeds here, where a kubelet's pod fails "
    "(gen-manifests refuses an OUTPUT_DIR, EXPORT_DIR or checkpoint directory outside them)",
    "a pod still running when the Job fails or meets its successPolicy stays listed, ended by SIGTERM; a cluster's "
    "controller deletes it, so once terminated it is gone from the API",
)


class LocalPod:
    """Init containers one after the other, then the container; phase Succeeded or Failed at the end."""

    def __init__(self, run: PodRun, controller: JobController, cpus: set[int] | None):
        self.run, self.controller, self.cpus = run, controller, cpus
        self.record = PodRecord(run.name, run.index, phase="Running", started=time.time(), ports=dict(run.ports))
        self.queue = list(run.init_containers) + [run.container]
        self.evicted = False
        self.current = self._start_next()

    def _start_next(self) -> ContainerProcess:
        container = self.queue.pop(0)
        label = self.run.name if not self.queue else f"{self.run.name}/{container.name}"
        log = self.controller.root / "logs" / f"{self.run.name}.log"
        return ContainerProcess(container, self.run.uid, self.run.name, label, log, self.controller.display.emit,
                                self.cpus)

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
        """As the kubelet ends a deleted pod (Kubernetes 1.27+): a terminal phase from the exit codes, Succeeded
        when the main container exited 0 (it finished, or stopped cleanly on SIGTERM), else Failed."""
        self.current.terminate(grace)
        if self.record.phase == "Running":
            code = self.current.poll()  # 143 for a process that stopped on SIGTERM, 137 once the grace ran out
            code = 137 if code is None else ContainerProcess.exit_code(code)
            self.record.exit_codes.setdefault(self.current.run.name, code)
            main_ran = not self.queue  # the main container, not an init container, was running
            self.record.phase = "Succeeded" if main_ran and self.record.exit_codes[self.current.run.name] == 0 \
                else "Failed"
            self.record.finished = time.time()

    def evict(self, grace: float, reason: str | None) -> None:
        """As the Eviction API or a preemption (``reason``: the DisruptionTarget condition's), or as a plain
        `kubectl delete pod` (None: no condition): termination with the grace period, in the background (the
        controller goes on watching every pod meanwhile)."""
        self.evicted = True
        if reason is not None:
            self.record.conditions.append({"type": "DisruptionTarget", "status": "True", "reason": reason})
        threading.Thread(target=self.current.terminate, args=(grace,), daemon=True).start()


class JobController:
    """The Job's loop: pods started, watched and replaced; each rule is its policy's (failure_policy.py,
    success_policy.py, backoff.py, accounting.py), this only applies them in the controller's order."""

    def __init__(self, plan: JobPlan, factory: PodFactory, root: Path, backoff_seconds: float = 10.0,
                 display: Display | None = None):
        self.plan, self.factory, self.root, self.backoff_seconds = plan, factory, root, backoff_seconds
        self.display = display or Display()
        self.records: list[PodRecord] = []
        self.accounting = Accounting.of(plan)
        self.conditions: list[dict] = []
        self.interrupted: str | None = None
        self.started_at = time.time()
        self.ended_at: float | None = None

    def note(self, message: str) -> None:
        self.display.emit(f"local-job: {message}")

    def policy_match(self, record: PodRecord) -> tuple[str, str]:
        """(action, what matched) of the Job's podFailurePolicy for a failed pod."""
        return failure_policy.match((self.plan.spec.get("podFailurePolicy") or {}).get("rules", []), record,
                                    self.plan.namespace)

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
        """Run the Job to its end; (complete, reason, message). The status is published in the volume root as
        it changes (`local-job status` reads it), the last time once the Job has ended."""
        self.control = eviction.ControlDirectory(self.root)
        self.control.open()
        self.publish()
        try:
            return self._run()
        finally:
            self.ended_at = time.time()
            self.publish()
            self.control.close()

    def publish(self) -> None:
        """The status as it stands, where `local-job status` finds it: VOLUME_ROOT/status.json."""
        self.write_status(self.root / LIVE_STATUS, self.status())

    def _run(self) -> tuple[bool, str, str]:
        started = time.monotonic()
        running: dict[int, LocalPod] = {}
        pending = list(range(self.plan.completions))
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._interrupt)
        if self.plan.spec.get("suspend"):
            self.note("the Job is suspended (spec.suspend: a queue such as Kueue would admit it); running it now")
        while True:
            ended = self._stopped(running, started)
            if ended is None:
                self._serve_requests(running, pending)
                self.display.tick()
                ended = self._reap(running, pending) or self._settled()
            if ended is not None:
                return self._finish(running, ended)
            self._start_ready(running, pending)
            time.sleep(0.05)

    def _stopped(self, running: dict[int, LocalPod], started: float) -> Ended | None:
        """local-job itself interrupted, or the Job past activeDeadlineSeconds."""
        if self.interrupted is not None:  # local-job's own: the Job was not failed by its controller
            return Ended(False, "Interrupted", f"local-job received signal {self.interrupted}")
        deadline = self.plan.spec.get("activeDeadlineSeconds")
        if deadline is not None and time.monotonic() - started > float(deadline):
            return Ended(False, "DeadlineExceeded", "Job was active longer than specified deadline")
        return None

    def _reap(self, running: dict[int, LocalPod], pending: list[int]) -> Ended | None:
        """Every pod that has ended, counted as the controller counts it; the Job's end if one ends it."""
        for index, pod in self._ended(running):
            self.publish()
            record = pod.record
            if record.phase == "Succeeded":
                self.accounting.pod_succeeded(index)
                continue
            action, matched = self.policy_match(record)
            conditions = "".join(f", {c['type']}" for c in record.conditions)
            self.note(f"pod {record.name} failed (exit codes {record.exit_codes}{conditions}); "
                      f"podFailurePolicy: {action}")
            now = time.monotonic()
            outcome = self.accounting.pod_failed(index, action, matched, now)
            if isinstance(outcome, Ended):
                return outcome
            if outcome and index < self.plan.completions:  # replaced, after the back-off, while still in range
                pending.append(index)
                self._note_backoff(index, now)
        return None

    def _ended(self, running: dict[int, LocalPod]) -> Iterator[tuple[int, LocalPod]]:
        """The pods that have ended since the last look, one at a time (a caller that stops early leaves the rest
        running, to be seen next), each taken out of ``running`` and its resources released."""
        for index, pod in list(running.items()):
            if pod.step():
                del running[index]
                self.display.pod_ended(pod.record.name)
                self.factory.release(pod.run)
                yield index, pod

    def _settled(self) -> Ended | None:
        """Every index succeeded or failed for good with some failed (judged first, as the controller does: a Job
        whose other indexes have failed fails when its last one succeeds), else the successPolicy met, else every
        index succeeded."""
        settled = self.accounting.settled()
        if settled is not None and not settled.complete:
            return settled
        rules = (self.plan.spec.get("successPolicy") or {}).get("rules")
        met = success_policy.met(rules, self.accounting.succeeded) if rules else None
        return Ended(True, "SuccessPolicy", met) if met else settled

    def _start_ready(self, running: dict[int, LocalPod], pending: list[int]) -> None:
        """A pod for each pending index whose back-off is over, within parallelism."""
        now = time.monotonic()
        for index in sorted(pending):
            if len(running) >= self.plan.parallelism or now < self.accounting.ready_at(index, self.backoff_seconds):
                continue
            pending.remove(index)
            attempt = self.accounting.replacing(index)
            run = self.factory.pod(index)
            pod = LocalPod(run, self, self.cpus_for(index, run.cpu_limit))
            self.records.append(pod.record)
            running[index] = pod
            self.display.pod_started(run.name)
            self.publish()
            self.note(f"started pod {run.name} (index {index}" + (f", attempt {attempt})" if attempt > 1 else ")"))

    def _finish(self, running: dict[int, LocalPod], ended: Ended) -> tuple[bool, str, str]:
        if ended.complete:
            return self._succeed(running, ended.reason, ended.message)
        return self._fail(running, ended.reason, ended.message, count_running=ended.reason != "Interrupted")

    def _note_backoff(self, index: int, now: float) -> None:
        wait = self.accounting.ready_at(index, self.backoff_seconds) - now
        if wait > 0:
            self.note(f"index {index}: its next pod starts in {format_duration(wait)} (the Job controller's "
                      f"back-off: {self.backoff_seconds:g} s, doubling per failure, at most 10 min)")

    def _serve_requests(self, running: dict[int, LocalPod], pending: list[int]) -> None:
        """`local-job evict` (the DisruptionTarget condition, then SIGTERM), `local-job delete` (SIGTERM alone,
        as a plain `kubectl delete pod`: no condition, so the podFailurePolicy may count the pod's failure) and
        `local-job scale` (localjob/elastic.py)."""
        for kind, index in self.control.requests():
            if kind == eviction.SCALE:
                self.control.answer(kind, index, *self._scale(running, pending, index))
                continue
            pod = running.get(index)
            if pod is None or pod.evicted:
                self.control.answer(kind, index, False, f"no running pod with index {index}")
                continue
            evicting = kind == eviction.EVICT
            self.note(f"{'evicting' if evicting else 'deleting'} pod {pod.record.name}: "
                      f"{'condition DisruptionTarget, ' if evicting else ''}SIGTERM with its grace period "
                      f"({self.plan.grace_seconds:g} s)")
            pod.evict(self.plan.grace_seconds, "EvictionByEvictionAPI" if evicting else None)
            self.control.answer(kind, index, True, f"pod {pod.record.name} {'evicted' if evicting else 'deleted'}")

    def _scale(self, running: dict[int, LocalPod], pending: list[int], count: int) -> tuple[bool, str]:
        """The Job to ``count`` pods: pods for the new indexes, the pods of indexes out of range deleted (SIGTERM
        with the grace period) and never replaced; (done, the answer)."""
        try:
            changed = elastic.fields(self.plan, count)
        except elastic.Refused as refused:
            return False, str(refused)
        before = self.plan.completions
        self.plan.spec.update(changed)
        self.accounting.resize(count, changed["maxFailedIndexes"])
        pending[:] = [index for index in pending if index < count]
        pending.extend(index for index in range(before, count) if index not in running and index not in pending)
        for index, pod in sorted(running.items()):
            if index >= count and not pod.evicted:
                pod.evict(self.plan.grace_seconds, None)
        removed = f"; deleting the pods of indexes {count} to {before - 1}" if count < before else ""
        self.note(f"Job scaled from {before} to {count} pods (completions, parallelism {count}, maxFailedIndexes "
                  f"{changed['maxFailedIndexes']}){removed}")
        self.publish()
        return True, f"Job {self.plan.name} scaled from {before} to {count} pods"

    def _interrupt(self, signum, frame) -> None:
        self.interrupted = signal.Signals(signum).name

    # -- the end ------------------------------------------------------------------------------------
    def condition(self, kind: str, reason: str, message: str) -> dict:
        """A Job condition as the API writes it, appended to the status's list."""
        stamp = api_time(time.time())
        condition = {"type": kind, "status": "True", "reason": reason, "message": message,
                     "lastProbeTime": stamp, "lastTransitionTime": stamp}
        self.conditions.append(condition)
        return condition

    def _fail(self, running: dict[int, LocalPod], reason: str, message: str,
              count_running: bool = True) -> tuple[bool, str, str]:
        """FailureTarget at once; every pod still running counts as failed (unless a podFailurePolicy rule
        ignores it as it stands, e.g. an eviction in progress), is terminated with its grace period, and only
        then the Job is Failed: the controller's order (kube-controller-manager, job_controller.go)."""
        self.condition("FailureTarget", reason, message)
        if count_running:
            self.accounting.failed += sum(1 for pod in running.values()
                                          if self.policy_match(pod.record)[0] != failure_policy.IGNORE)
        self._end(running, f"{reason}: {message}", f"the Job failed ({reason})")
        self.condition("Failed", reason, message)
        return False, reason, message

    def _succeed(self, running: dict[int, LocalPod], reason: str, message: str) -> tuple[bool, str, str]:
        """SuccessCriteriaMet at once; the pods still running are terminated, none counted as failed, and one that
        ends Succeeded counts (the controller counts every pod that reaches Succeeded before Complete), then the
        Job is Complete."""
        self.condition("SuccessCriteriaMet", reason, message)
        self._reap_until_the_deletion_lands(running)
        ending = dict(running)
        self._end(running, f"SuccessCriteriaMet ({message})", "the Job met its successPolicy")
        for index, pod in ending.items():
            if pod.record.phase == "Succeeded":
                self.accounting.pod_succeeded(index)
        self.condition("Complete", reason, message)
        return True, reason, message

    def _reap_until_the_deletion_lands(self, running: dict[int, LocalPod]) -> None:
        """A pod that ends on its own before the controller's deletion reaches its kubelet ends as it would have:
        a real deletion lands no sooner than the kubelet's next relist (KUBELET_RELIST_SECONDS), while a torchrun
        gang leaves its exit barrier together: under plain torchrun its followers a few milliseconds after the index
        that ended the Job (under our launcher, index 0 last: trainer_launcher/rendezvous_store.py). Counted as the
        controller counts a pod that ends before Complete."""
        deadline = time.monotonic() + KUBELET_RELIST_SECONDS
        while running and time.monotonic() < deadline:
            for index, pod in self._ended(running):
                if pod.record.phase == "Succeeded":
                    self.accounting.pod_succeeded(index)
                elif self.policy_match(pod.record)[0] != failure_policy.IGNORE:
                    self.accounting.failed += 1
            time.sleep(0.05)
        self.publish()

    def _end(self, running: dict[int, LocalPod], why: str, because: str) -> None:
        if running:
            self.note(f"{why}: terminating {len(running)} running pod(s) "
                      f"(grace period {self.plan.grace_seconds:g} s)")
        for pod in running.values():
            pod.record.terminated_by = because
        threads = [threading.Thread(target=pod.terminate, args=(self.plan.grace_seconds,)) for pod in running.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for pod in running.values():
            self.display.pod_ended(pod.record.name)
            self.factory.release(pod.run)
        running.clear()

    def summary(self) -> list[str]:
        """The Job at its end, a line per index: each of its pods, how it ended and what that exit code means."""
        lines = []
        for index in range(self.plan.completions):
            pods = []
            for record in (r for r in self.records if r.index == index):
                code = list(record.exit_codes.values())[-1] if record.exit_codes else None
                said = f"terminated: {record.terminated_by}" if record.terminated_by else meaning(code or 0)
                ended = "" if code is None else f", exit {code}" + (f" ({said})" if code else "")
                took = format_duration(record.finished - record.started) if record.finished else "?"
                pods.append(f"{record.name} {record.phase}{ended} after {took}")
            lines.append(f"index {index}: " + ("; then ".join(pods) or "no pod started"))
        return lines

    def status(self) -> dict:
        """The Job's final status: ``conditions``, ``succeeded``, ``failed``, ``completedIndexes`` and
        ``failedIndexes`` as the Job controller writes them (its counting, its words, its index notation); then
        local-job's own: the final ``condition``, ``ignored`` (failed pods a podFailurePolicy Ignore rule
        matched), ``restarts`` per index and every pod with its exit codes."""
        counts = self.accounting
        return {
            "name": self.plan.name,
            "namespace": self.plan.namespace,
            "conditions": self.conditions,
            "succeeded": len(counts.succeeded),
            "failed": counts.failed,
            "completedIndexes": format_indexes(counts.succeeded),
            "failedIndexes": format_indexes(counts.failed_indexes),
            # the final condition; null while the Job runs
            "condition": {key: self.conditions[-1][key] for key in ("type", "reason", "message")}
            if self.conditions else None,
            "ignored": counts.ignored,
            "restarts": {str(index): count for index, count in counts.restarts.items()},
            "pods": [vars(record) for record in self.records],
            "completions": self.plan.completions,
            "backoffLimit": self.plan.backoff_limit,
            "maxFailedIndexes": self.plan.spec.get("maxFailedIndexes"),
            # a Job of replica groups (its Lighthouse beside it): its view says the groups
            "replicaGroups": self.plan.lighthouse is not None,
            # who writes this status, and when: `local-job status` tells a running Job from an abandoned one
            "localJob": {"pid": os.getpid(), "startedAt": self.started_at, "endedAt": self.ended_at},
            "differences": list(DIFFERENCES),
        }

    def write_status(self, path: Path, status: dict) -> None:
        atomic_write(path, (json.dumps(status, indent=2) + "\n").encode())
