"""torchrun, exiting with the worker's code: the pod's exit code is what podFailurePolicy acts on.

    python -m worker.launch --nnodes=2 --nproc-per-node=1 --node-rank=$(JOB_COMPLETION_INDEX) \\
        --master-addr=JOB-0.SERVICE --master-port=29500 -m worker     # the Job's main container
    python -m worker.launch --standalone --nproc-per-node=2 -m worker  # anything torchrun runs

It takes torchrun's arguments and runs torchrun's own launcher (torch.distributed.run); it differs only in
what it exits with and in two checks before the rendezvous:

- torchrun exits 1 whatever failed. This exits with the code of the worker that failed first (a signal
  death as 128 + signal). Victims yield to any other failure torchrun saw in the same round: a worker that
  exited PEER_LOST (75: "a peer failed first") and one that torchrun itself stopped with SIGTERM once another
  had failed (143), so the root cause is what the pod reports.
- SIGTERM is forwarded to the workers as torchrun does (they checkpoint); the exit code is then 128 + the
  signal, or 0 when the run is complete on the volume (it finished during the grace period).
- A rendezvous that does not assemble the gang within the join timeout exits STALLED (76), with the reason.
- For a built-in program, a failed round is restarted in place (values restart_in_place, on by default): the
  launcher stays up, starts new workers that resume from the newest checkpoint, and the gang re-forms without a
  pod being recreated; failed rounds draw from max_restarts (trainer_launcher/recovery.py).
- For a built-in program, each pod notes in OUTPUT_DIR/.gang/ how it ended, and index 0, itself a victim,
  exits STALLED (76, counted once) when every pod of the attempt ended as a victim (trainer_contract.gang_ledger);
  in place, index 0 counts that round instead.
- With checkpoint.storage_uri and a program of the user's, node 0 mirrors the checkpoints the program writes into
  INDEXED_TRAINER_CHECKPOINT_DIR to the bucket, beside torchrun (checkpoint_watch.py).
- Over several nodes, a failed round in place reaches every pod at once: the launcher that saw it first sets a key
  in torchrun's store, and every other launcher, waiting on it, stops its workers instead of leaving them blocked in
  the process group's connect until the collective timeout (round_alarm.py).
- Over several nodes, node 0 leaves torchrun's exit barrier last: it keeps the rendezvous store up until the others
  have counted themselves out (rendezvous_store.py), so no follower's agent logs a lost store after a completed run.
- Before any rendezvous: ``--node-rank`` must be JOB_COMPLETION_INDEX (else ranks collide: exit 78), and for
  a built-in program (``-m worker``, ``-m worker.finetune``, ...) a run that is already complete in OUTPUT_DIR
  exits 0 at once, or 78 if it was made with other settings. A pod recreated after its gang finished must not wait
  for peers that will never come.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import sys
import time
from pathlib import Path

from torch.distributed import DistError
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.elastic.rendezvous import RendezvousError
from torch.distributed.run import parse_args
from torch.distributed.run import run as torchrun

from trainer_contract import exit_codes, launcher, pod_environment, replica_groups, storage
from trainer_contract.exit_codes import signal_exit_code
from trainer_contract.gang_ledger import WAIT_SECONDS, GangLedger, notes_root, volume_problem
from trainer_contract.gang_rounds import (
    SLURM_RESTART_VARIABLE,
    GangRounds,
    in_place_settings,
    job_identity,
    lost_nodes_replaced,
)
from trainer_contract.launcher import write_termination_message
from trainer_contract.program_settings import OUTPUT_VARIABLE
from trainer_contract.progress import WAIT_REPORT_SECONDS
from trainer_contract.settings import ConfigError
from trainer_launcher import rendezvous_store, round_alarm
from trainer_launcher.checkpoint_watch import watch_from
from trainer_launcher.leader_port import LeaderPort
from trainer_launcher.programs import KeptRun, kept_run, warm_imports
from trainer_launcher.recovery import InPlaceRecovery
from trainer_launcher.warm_workers import WarmWorkers

_said: list[str] = []
_signalled: list[int] = []  # the signals this launcher received during the round (not its workers' own deaths)
_warned: list[str] = []  # warnings the termination message carries too, whatever the ending
_root_cause: list[int] = []  # the process of the worker that failed first in the round, as torchrun reported it


def say(message: str) -> None:
    _said.append(message)
    print(f"launcher: {message}", file=sys.stderr, flush=True)


def termination_message(code: int, args) -> str:
    """One line: how the pod ended, in words, and the launcher's last word on why (or the run's result); then its
    warnings (a GPU job trained on the CPU)."""
    warnings = "".join(f"; warning: {text}" for text in _warned)
    line = f"exit {code}: {exit_codes.meaning(code)}"
    if code == exit_codes.OK:
        run = quiet_kept_run(args)
        result = run.result() if run is not None else None
        return f"{line}: {result}{warnings}" if result else line + warnings
    return (f"{line}; {_said[-1]}" if _said else line) + warnings


def container_code(exitcode: int) -> int:
    """A process's exit status as a container runtime reports it: a signal death is 128 + the signal."""
    return signal_exit_code(-exitcode) if exitcode < 0 else exitcode


# What a worker exits with when it failed because of another: a peer's failure ("free"), or torchrun's own
# SIGTERM to the survivors once one worker had failed ("stop").
VICTIM_CODES = exit_codes.codes_taking("free", "stop")


def root_cause(failures: dict[int, ProcessFailure]) -> tuple[int, ProcessFailure]:
    """The failure to report: the first by time (then by rank) that is not a victim's, else the first."""
    ordered = sorted(failures.items(), key=lambda item: (item[1].timestamp, item[0]))
    causes = [item for item in ordered if container_code(item[1].exitcode) not in VICTIM_CODES]
    return (causes or ordered)[0]


def quiet_kept_run(args) -> KeptRun | None:
    """The run the program keeps on the volume (trainer_launcher.programs), or None: another program, or
    malformed settings (which the program itself reports, naming the variable, with the same exit code)."""
    try:
        return kept_run(args.training_script if args.module else None, args.training_script_args)
    except ConfigError:
        return None


def unwritable(path: Path) -> str | None:
    """Why this process could not create or write ``path``, or None. A volume the runtime created as root
    (``docker run -v DIR:/pvc-home`` with a new DIR) is the usual cause: say so before torch's tracebacks."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    if os.statvfs(existing).f_flag & os.ST_RDONLY:  # a pod's root (readOnlyRootFilesystem): no owner can fix that
        return (f"{existing} is on a read-only filesystem (a pod's root is); put it under the shared volume "
                f"({launcher.SHARED_MOUNT}/, where it defaults to) or a writable volume")
    owner = existing.stat().st_uid
    return (f"{existing} is not writable by uid {os.getuid()} (it belongs to uid {owner}); make the volume "
            f"writable by uid {os.getuid()} (on the host: sudo chown -R {os.getuid()} DIR, or docker run --user "
            f"\"$(id -u):$(id -g)\", with rootless podman also --userns=keep-id; on Kubernetes the pod's fsGroup "
            "does it)")


def check_before_rendezvous(args) -> int | None:
    """An exit code when the pod must not join the rendezvous at all; None to go on."""
    index = os.environ.get("JOB_COMPLETION_INDEX", "").strip()
    if index.isdigit() and str(args.node_rank) != str(replica_groups.node_rank_of(os.environ, int(index))):
        expected = "0 (with REPLICA_GROUPS each pod is a gang of its own)" if replica_groups.node_rank_of(
            os.environ, 1) == 0 else "$(JOB_COMPLETION_INDEX)"
        say(f"configuration error: --node-rank={args.node_rank} but JOB_COMPLETION_INDEX={index}: pods would "
            f"take each other's ranks; run with --node-rank={expected}")
        return exit_codes.BAD_CONFIG
    run = quiet_kept_run(args)
    if run is None:
        return None
    for variable, path in run.directories().items():
        problem = unwritable(path)
        if problem:
            say(f"configuration error: {variable}={path}: {problem}")
            return exit_codes.BAD_CONFIG
    if not run.resumes() or not run.finished():
        return None
    problems = run.changed_settings()
    for problem in problems:
        say(f"configuration error: {problem}")
    if problems:
        return exit_codes.BAD_CONFIG
    say(run.describe_finished())
    return exit_codes.OK


def gang_ledger(args, environ=os.environ) -> GangLedger | None:
    """The ledger of how the gang's pods ended (trainer_contract.gang_ledger), in the directory of the run the
    program keeps, or, where the render restarts rounds in place (a built-in workload), in its OUTPUT_DIR; None
    otherwise."""
    run = quiet_kept_run(args)
    output = run.output_dir() if run is not None else None
    if output is None and in_place_settings(environ)[0] and environ.get(OUTPUT_VARIABLE):
        output = Path(environ[OUTPUT_VARIABLE])
    if output is None:
        return None
    nodes = int(str(args.nnodes).split(":")[-1])
    return GangLedger(notes_root(output, environ), int(args.node_rank), nodes)


def upload_export(args, environ=os.environ) -> int:
    """Node 0 of a completed run uploads EXPORT_DIR to export.storage_uri (a built-in program's export is written
    first if the run finished before one was asked for; with replica groups, the group's that wrote the model); the
    exit code the pod ends with."""
    text = environ.get(storage.URI_VARIABLES["export"])
    if not text or str(args.node_rank) != "0":
        return exit_codes.OK
    from trainer_stager.errors import StagingError
    from trainer_stager.upload import upload_directory

    directory = Path(environ.get(storage.EXPORT_VARIABLE) or ".")
    try:
        run = kept_run(args.training_script if args.module else None, args.training_script_args)
        if run is not None and not replica_groups.uploads_the_export(run.summary(), environ):
            say("the export is uploaded by the replica group that wrote the model, not this one")
            return exit_codes.OK
        if run is not None and not any(directory.glob("*")) and run.finished():
            run.write_export(directory)
        upload_directory(storage.parse(text, "export"), directory, say)
    except (StagingError, ConfigError, OSError) as error:
        retryable = getattr(error, "retryable", False)
        code = exit_codes.DATA_UNAVAILABLE if retryable else exit_codes.BAD_CONFIG
        say(f"the export to {text} failed: {error}; exiting {code}")
        return code
    return exit_codes.OK


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    code = _launch(args)
    if code == exit_codes.OK:
        code = upload_export(args)
    write_termination_message(termination_message(code, args))
    return code


def gpu_shortfall(environ=os.environ, seen: int | None = None) -> int | None:
    """GPU_MISSING when this pod sees fewer GPUs than the Job asked for and may not fall back to the CPU; None
    otherwise, after one warning line when it falls back. A CPU job (no request in the environment) is not checked."""
    asked = int(environ.get(pod_environment.GPUS_VARIABLE, "0") or 0)
    if not asked:
        return None
    if seen is None:
        import torch  # a CUDA build without a driver reports 0 devices

        seen = torch.cuda.device_count()
    if seen >= asked:
        return None
    sees = f"sees {seen}" if seen else "sees none"
    gpus = f"{asked} GPU" + ("s" if asked != 1 else "")
    if environ.get(pod_environment.CPU_FALLBACK_VARIABLE, "false").strip().lower() != "true":  # the values' default
        say(f"configuration error: this pod asked for {gpus} (resources.gpu.accelerator_count) but {sees}, and "
            f"resources.gpu.cpu_fallback is false: not training on the CPU; exiting {exit_codes.GPU_MISSING}, not "
            "retried (check the node's driver and device plugin and the image's CUDA, or set "
            "resources.gpu.cpu_fallback: true to train on the CPU)")
        return exit_codes.GPU_MISSING
    warn(f"this pod asked for {gpus} (resources.gpu.accelerator_count) but {sees}: training on the CPU "
         "(set resources.gpu.cpu_fallback: false to fail instead)")
    return None


def warn(message: str) -> None:
    """A warning line, which the status views show and the pod's termination message repeats."""
    _warned.append(message)
    print(f"{launcher.LAUNCHER_WARNING}{message}", file=sys.stderr, flush=True)


def check_locked_memory(environ=os.environ, limit: int | None = None) -> None:
    """One warning when NCCL's InfiniBand transport is on (the values' network: infiniband) in a GPU pod whose
    locked-memory limit is not unlimited: NCCL registers its buffers with the HCA, which pins them. A non-root
    container cannot be given CAP_IPC_LOCK (added capabilities never reach its processes), so the limit is the
    node's container runtime's to set; NCCL itself would fail later, inside the first collective."""
    if environ.get(pod_environment.IB_DISABLE_VARIABLE, "").strip() != "0" or not int(environ.get(pod_environment.GPUS_VARIABLE, "0") or 0):
        return
    if limit is None:
        limit = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    if limit == resource.RLIM_INFINITY:
        return
    warn(f"NCCL's InfiniBand transport is on (NCCL_IB_DISABLE=0) but this pod's locked-memory limit is "
         f"{limit // 1024} KiB (ulimit -l): NCCL pins its buffers for the HCA and may fail to register them; the "
         "node sets the limit (Kubernetes: the container runtime's service, containerd's LimitMEMLOCK=infinity; "
         "Slurm: slurmd's, with PropagateResourceLimits), a non-root pod cannot be given CAP_IPC_LOCK instead")


def _launch(args) -> int:
    early = check_before_rendezvous(args)
    if early is not None:
        return early
    missing = gpu_shortfall()
    if missing is not None:
        return missing
    check_locked_memory()
    ledger = gang_ledger(args)
    if ledger is not None:
        problem = volume_problem(ledger.directory.parent, ledger.node)
        if problem is not None:
            say(f"{problem}; exiting {exit_codes.BAD_CONFIG}")
            return exit_codes.BAD_CONFIG
        ledger.start()
    recovery = in_place_recovery(args, ledger)
    if recovery is not None:
        code = run_rounds(args, recovery)
        assert ledger is not None
        if code != exit_codes.OK:
            ledger.note(code)
        return code
    waited = wait_for_leader(args)
    code = run_training(args) if waited is None else waited
    if ledger is None or code == exit_codes.OK:
        return code
    ledger.note(code)
    if code == exit_codes.PEER_LOST and ledger.node == 0:
        say(f"this pod's worker lost its peers (exit {code}); waiting up to {WAIT_SECONDS:.0f} s for the other "
            f"pods' notes in {ledger.directory} to tell whether one of them failed first")
        if ledger.nobody_failed_first():
            say(f"every pod of the gang ended as a victim (75) and none failed first: this attempt counts once, "
                f"as index 0's failure; the pod exits {exit_codes.STALLED}")
            return exit_codes.STALLED
    return code


def in_place_recovery(args, ledger: GangLedger | None, environ=os.environ) -> InPlaceRecovery | None:
    """The launcher's in-place recovery (trainer_launcher/recovery.py), or None: values restart_in_place is false,
    no gang ledger (a program that keeps no run), or a gang of several pods outside a Job (no Job identity to count
    its failed rounds under)."""
    enabled, limit = in_place_settings(environ)
    if not enabled or ledger is None:
        return None
    job = job_identity(environ)
    if job is None and ledger.nodes > 1:
        return None
    rounds = GangRounds(ledger.directory.parent, ledger.node, ledger.token, job,
                        step=environ.get(SLURM_RESTART_VARIABLE, "").strip())
    return InPlaceRecovery(rounds, ledger, limit, say, tell, replaced=lost_nodes_replaced(environ), environ=environ)


def run_rounds(args, recovery: InPlaceRecovery) -> int:
    """Rounds of torchrun until one completes or a failure ends the pod (trainer_launcher/recovery.py); a built-in
    program's later rounds start their workers warm (trainer_launcher/warm_workers.py)."""
    module = args.training_script if args.module else None
    with WarmWorkers(module, warm_imports(module)) as warm:
        while True:
            code = _round(args, recovery, warm)
            if code is not None:
                return code


def _round(args, recovery: InPlaceRecovery, warm: WarmWorkers) -> int | None:
    """One round; the code the pod ends with, or None for the next round."""
    try:
        code = recovery.enter(join_timeout(args), lambda: wait_for_leader(args), woken=leader_port(args))
    except SignalException as stopped:
        return recovery.end(stopped_between_rounds(args, stopped))
    if code is not None:
        return recovery.end(code)
    warm.start()
    _signalled.clear()
    code = run_training(args, spare=warm.pids(), alarm=True)
    if code == exit_codes.OK:
        return recovery.end(code)
    try:
        return recovery.after(code, signalled=bool(_signalled))
    except SignalException as stopped:
        return recovery.end(stopped_between_rounds(args, stopped))


def leader_port(args) -> LeaderPort | None:
    """Node 0's rendezvous port, probed by a node waiting for the next round (leader_port.py); None on node 0 or
    without a static rendezvous."""
    if args.standalone or int(args.node_rank) == 0 or args.rdzv_backend != "static" or not args.master_addr:
        return None
    return LeaderPort(args.master_addr, int(args.master_port))


def stopped_between_rounds(args, stopped: SignalException) -> int:
    """SIGTERM while no worker runs (between rounds): 0 when the run is complete, else 128 + the signal."""
    return stopped_by(args, stopped, " between rounds (no worker running); exiting "
                      f"{signal_exit_code(stopped.sigval)}")


def stopped_by(args, stopped: SignalException, otherwise: str) -> int:
    """The pod's code after the launcher received a signal: 0 when the run is complete (it finished within the
    grace period), else 128 + the signal, with ``otherwise`` after "SIGTERM received"."""
    sig = signal.Signals(stopped.sigval)
    run = quiet_kept_run(args)
    if run is not None and run.finished():
        say(f"{sig.name} received after the run completed; exiting 0")
        return exit_codes.OK
    if os.environ.get(replica_groups.GROUPS, "").strip():
        say(f"{sig.name} received: this replica group leaves between two steps, the others hold its state; exiting "
            f"{exit_codes.GROUP_LEFT} (not counted)")
        return exit_codes.GROUP_LEFT
    say(f"{sig.name} received{otherwise}")
    return signal_exit_code(sig.value)


# A node waiting for index 0's port probes it this often, each probe at a random point of its interval (a thousand
# nodes whose round failed together would otherwise probe in step); after LEADER_PATIENT_AFTER_SECONDS (index 0's pod
# being scheduled, pulling its image), every LEADER_PATIENT_POLL_SECONDS.
LEADER_POLL_SECONDS = 0.25
LEADER_PATIENT_AFTER_SECONDS = 30.0
LEADER_PATIENT_POLL_SECONDS = 1.0


def join_timeout(args) -> float:
    """torchrun's --rdzv-conf timeout (its default: 900 s)."""
    for item in str(args.rdzv_conf or "").split(","):
        key, _, value = item.partition("=")
        if key.strip() == "timeout":
            try:
                return float(value)
            except ValueError:
                break
    return 900.0


def wait_for_leader(args) -> int | None:
    """A pod other than index 0 waits until index 0's rendezvous port answers, saying what it waits for; None then
    (torchrun joins at once), STALLED if it never does within the join timeout.

    torchrun's own store client retries a refused connection with a growing back-off: a pod that started well
    before index 0 (restarted after its own failure, while index 0 waited for the gang's notes) joined seconds
    after index 0 was up. The name is looked up once, and again only while nothing answers (leader_port.py: at
    1,024 nodes a lookup per probe was 4,000 a second to the cluster's DNS); an unresolvable name (the headless
    Service has no record of index 0 yet) reads as what it is."""
    if args.standalone or int(args.node_rank) == 0 or args.rdzv_backend != "static" or not args.master_addr:
        return None
    host, port, limit = args.master_addr, int(args.master_port), join_timeout(args)
    leader = LeaderPort(host, port)
    began = time.monotonic()
    report = began + WAIT_REPORT_SECONDS
    first = True
    while True:
        if leader.answers():
            if not first:
                say(f"index 0's rendezvous at {host}:{port} answers after {time.monotonic() - began:.1f} s")
            return None
        waited = time.monotonic() - began
        if first:
            say(f"waiting for index 0's rendezvous at {host}:{port} ({leader.reason}); the join timeout is {limit:g} s")
            first = False
        elif time.monotonic() >= report:
            say(f"still waiting for index 0's rendezvous at {host}:{port}: {waited:.0f} s of {limit:g} s "
                f"({leader.reason})")
            report += WAIT_REPORT_SECONDS
        if waited >= limit:
            say(f"the gang did not assemble: index 0's rendezvous at {host}:{port} did not answer within the join "
                f"timeout ({limit:g} s; {leader.reason}); exiting {exit_codes.STALLED}")
            return exit_codes.STALLED
        interval = LEADER_POLL_SECONDS if waited < LEADER_PATIENT_AFTER_SECONDS else LEADER_PATIENT_POLL_SECONDS
        time.sleep(interval * random.uniform(0.5, 1.5))


def tell(message: str) -> None:
    """A line of the launcher's that is no reason for the pod's ending (the termination message keeps say()'s)."""
    print(f"launcher: {message}", file=sys.stderr, flush=True)


def run_training(args, environ=os.environ, spare: frozenset[int] = frozenset(), alarm: bool = False) -> int:
    """torchrun, with node 0's watch over a user's program's checkpoint directory beside it when the render asks for
    one (checkpoint.storage_uri: trainer_launcher/checkpoint_watch.py); the pod's exit code. ``alarm``: a round in
    place, whose failure the other pods learn at once (round_alarm.py); ``spare``: this process's children that are
    not torchrun's (the warm-worker server)."""
    try:
        watch = watch_from(environ, args.node_rank, tell)
    except ConfigError as error:
        for problem in error.problems:
            say(f"configuration error: {problem}; exiting {exit_codes.BAD_CONFIG}")
        return exit_codes.BAD_CONFIG
    try:
        return run_torchrun(args, spare if alarm else None)
    finally:
        if watch is not None:
            close_watch(watch)


def close_watch(watch) -> None:
    """The newest checkpoint offered once more, and the upload in flight finished: a SIGTERM meanwhile (the Job
    failing, a preemption) does not cut it off, the grace period does (a cut-off upload is never complete)."""
    while True:
        try:
            watch.close()
            return
        except SignalException as stopped:
            tell(f"checkpoint mirror: {signal.Signals(stopped.sigval).name} received; finishing the upload in "
                 "flight within the grace period")


def run_torchrun(args, spare: frozenset[int] | None = None) -> int:
    """torchrun, and the exit code the pod reports for how it ended; over several nodes, node 0 keeps torchrun's
    store up until the others are out of its exit barrier (rendezvous_store.py), and with ``spare`` (a round in
    place: this process's children that are no workers) a round's failure reaches every pod at once
    (round_alarm.py). A program of the user's is left to end as it does: its SIGTERM handling stays its own."""
    store = rendezvous_store.hold(args)  # node 0's handle, dropped on return: the store's server closes with it
    alarm = None if spare is None else round_alarm.RoundAlarm.beside(args, spare)
    _root_cause.clear()
    code = _run_torchrun(args)
    if alarm is not None:
        try:
            alarm.end(code, bool(_signalled))
        except SignalException as stopped:  # as the round ended, before the next: the pod ends, as between rounds
            _signalled.append(stopped.sigval)
            return stopped_between_rounds(args, stopped)
        if code != exit_codes.OK and not _signalled and alarm.stopped_first(_root_cause.pop() if _root_cause else None):
            say(f"the round failed on {alarm.describe()} first: this pod's workers were stopped at once rather than "
                f"left waiting for it until the collective timeout; exiting {exit_codes.PEER_LOST} (a victim)")
            code = exit_codes.PEER_LOST
    if code == exit_codes.OK:
        leave_exit_barrier(args, store)
    return code


def leave_exit_barrier(args, store) -> None:
    """After a completed round over several nodes: node 0 waits for the followers' count, a follower counts itself
    out. The run is complete: whatever happens here (a signal included), the pod exits 0."""
    if not rendezvous_store.followers(args):
        return
    try:
        if int(args.node_rank) != 0:
            if not rendezvous_store.count_out(args):
                tell("node 0's rendezvous store no longer answered to count this node out of torchrun's exit barrier; "
                     "the run is complete, the pod exits 0")
        elif store is not None and not rendezvous_store.wait_for_followers(args, store):
            tell(f"not every other node said its torchrun had returned within {rendezvous_store.LINGER_SECONDS:g} s "
                 "of this one's; the run is complete, the pod exits 0")
    except SignalException as stopped:
        tell(f"{signal.Signals(stopped.sigval).name} received after the run completed, while leaving torchrun's exit "
             "barrier; exiting 0")


def _run_torchrun(args) -> int:
    try:
        torchrun(args)
        return exit_codes.OK
    except ChildFailedError as failed:
        rank, failure = root_cause(failed.failures)
        _root_cause[:] = [failure.pid]
        code = container_code(failure.exitcode)
        others = {r: container_code(f.exitcode) for r, f in failed.failures.items() if r != rank}
        say(f"worker rank {rank} failed first with exit code {code}"
            + (f" (then {', '.join(f'rank {r}: {c}' for r, c in sorted(others.items()))})" if others else "")
            + ("" if in_place_settings()[0] else f"; the pod exits {code}"))
        return code
    except SignalException as stopped:
        _signalled.append(stopped.sigval)
        return stopped_by(args, stopped, "; forwarded to the workers, which had until --shutdown-timeout to "
                          "checkpoint")
    except (RendezvousError, DistError, TimeoutError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        say(f"the gang did not assemble: {type(exc).__name__}: {first_line}; exiting {exit_codes.STALLED}")
        return exit_codes.STALLED


if __name__ == "__main__":
    sys.exit(main())
