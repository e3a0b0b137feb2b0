"""local-job: run the rendered Indexed Job on this machine, as Kubernetes would.

    gen-manifests --values variables/variables.json | local-job
    local-job build/ --volume-root runs/local-job
    local-job build/ --volume mnist-train-data=/data/mnist-volume      # use an existing directory as a claim
    local-job evict --volume-root runs/local-job 1                     # from another terminal: preempt pod 1
    local-job delete --volume-root runs/local-job 0                    # ... or delete pod 0 (kubectl delete pod)
    local-job status --volume-root runs/local-job                      # the running (or last) run, at a glance
    local-job clean build/                                             # remove what local-job keeps for the Job
    local-job job.yaml --image-dir ./my-training --secret hf=./hf.env  # your own train.py, with a Secret
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click

from localjob.manifests import ManifestError, jobs_of, plan, read_source
from trainer_contract.metrics import PORT_NAME

EXIT_FAILED, EXIT_REFUSED, EXIT_INTERRUPTED = 1, 2, 130


def _pairs(option: str, items: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ManifestError(f"{option} {item!r}: expected NAME=VALUE")
        pairs[key] = value
    return pairs


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("source", default="-", metavar="[MANIFESTS]")
@click.option("--volume-root", type=click.Path(file_okay=False, path_type=Path),
              help="Directory holding the volumes, pod directories and logs (default: one per Job, the same on "
                   "every run: $XDG_STATE_HOME/local-job/NAMESPACE/NAME, ~/.local/state/... without it).")
@click.option("--volume", "volumes", multiple=True, metavar="CLAIM=DIR",
              help="Use an existing directory as the PersistentVolumeClaim CLAIM (e.g. one holding MNIST).")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
              help="Extra environment variable for every container, as an image's ENV would set it.")
@click.option("--secret", "secrets", multiple=True, metavar="NAME=PATH",
              help="The Secret NAME the pods use: a file of KEY=VALUE lines or a directory of one file per key "
                   "(as kubectl create secret generic --from-env-file / --from-file read them). Never printed.")
@click.option("--image-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="The directory standing for the image's working directory: containers run there, and the "
                   "manifest's workingDir maps to it (default: the current directory).")
@click.option("--backoff-seconds", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="First delay before a failed index is recreated (doubles per failure, as in Kubernetes).")
@click.option("--allow-root", is_flag=True, envvar="LOCAL_JOB_ALLOW_ROOT",
              help="Run as root: where the pods cannot run as their securityContext's user (it cannot reach the "
                   "command or a directory; no user with runAsNonRoot), run them as root instead of refusing, and "
                   "say so. Also LOCAL_JOB_ALLOW_ROOT=1.")
@click.option("--status-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the Job's final status (condition, restarts, pods and exit codes) as JSON here too (the "
                   "status as it stands is always in VOLUME_ROOT/status.json: local-job status reads it).")
def local_job(source, volume_root, volumes, env, secrets, image_dir, backoff_seconds, allow_root, status_file):
    """Run the Job in MANIFESTS (a file, a directory, or - for stdin: the output of gen-manifests) locally.

    Each pod is a process tree with the environment Kubernetes would give it; the exit code is 0 when the
    Job completes, 1 when it fails (with the reason Kubernetes would give), 2 when the manifests cannot be
    run faithfully here.

    Beside it: `local-job status` (the running or last run), `local-job evict` (preempt a pod), `local-job
    delete` (delete one), `local-job scale` (replica groups: more or fewer pods), `local-job clean` (remove what
    local-job keeps for the Job); each has --help.
    """
    from localjob.controller import JobController
    from localjob.display import display_for

    job_plan, factory, claim_dirs = _pods(source, volume_root, volumes, env, secrets, image_dir, allow_root)
    display = display_for()
    controller = JobController(job_plan, factory, factory.root, backoff_seconds, display)
    for line in _opening(job_plan, factory):
        controller.note(line)
    began = time.monotonic()
    with contextlib.closing(display):
        ran, ended = _run_in_order(job_plan, factory, controller, backoff_seconds, display)
    if status_file:
        ran.write_status(status_file, ran.status())
    return _report(ran, claim_dirs, ended, time.monotonic() - began)


def _run_in_order(job_plan, factory, controller, backoff_seconds, display):
    """The stage Job (initializer.separate_job) to its end, then, where it completed, the training Job with its
    Lighthouse: the controller that ran last, and how its Job ended. A stage Job that failed leaves the training Job
    unstarted, as ./run.sh leaves it unapplied."""
    staged = _stage_first(job_plan, factory, backoff_seconds, display)
    if staged is not None and not staged[1][0]:
        return staged
    with _lighthouse(job_plan, factory, controller):
        return controller, controller.run()


def _stage_first(job_plan, factory, backoff_seconds, display):
    """The stage Job (initializer.separate_job) run to its end before the training Job, as ./run.sh and Argo CD's
    sync waves apply them: its controller and how it ended; None without one."""
    from localjob.controller import JobController
    from localjob.podspec import PodFactory

    if job_plan.stage is None:
        return None
    stage_factory = PodFactory(job_plan.stage, factory.root, factory.claim_dirs, factory.extra_env, {},
                               factory.image_dir)
    stage_factory.identity = factory.identity
    stage = JobController(job_plan.stage, stage_factory, factory.root, backoff_seconds, display)
    stage.note(f"Job {job_plan.stage.name} first (initializer.separate_job): it stages onto the volume, then Job "
               f"{job_plan.name} trains")
    ended = stage.run()
    if ended[0]:
        stage.note(f"Job {job_plan.stage.name} complete: {ended[2]}")
    return stage, ended


@contextlib.contextmanager
def _lighthouse(job_plan, factory, controller) -> Iterator[None]:
    """The replica groups' Lighthouse while the Job runs, started before its pods (its Deployment is applied
    before the Job); nothing without replica groups."""
    if job_plan.lighthouse is None:
        yield
        return
    from localjob.lighthouse import LocalLighthouse

    name = f"Deployment {job_plan.lighthouse['metadata']['name']}"
    lighthouse = LocalLighthouse(name, factory.lighthouse_command(), factory.root / "lighthouse.log", controller.note)
    lighthouse.start()
    controller.note(f"{name}: torchft's Lighthouse on 127.0.0.1 ({' '.join(lighthouse.command[1:])}; its log: "
                    f"{lighthouse.log})")
    try:
        yield
    finally:
        lighthouse.stop()


def _opening(job_plan, factory) -> list[str]:
    """The run's first lines: the Job, where its files are, what of it this machine does not enforce."""
    return [f"Job {job_plan.namespace}/{job_plan.name}: {job_plan.completions} pods, backoffLimit "
            f"{job_plan.backoff_limit}; volumes, pod directories and logs under {factory.root}",
            *job_plan.not_enforced, *factory.identity.notes]


def _pods(source, volume_root, volumes, env, secrets, image_dir, allow_root=False):
    """The Job's plan, the factory of its pods (and who they run as) and the claims given a directory;
    ManifestError for what cannot run here, before anything starts."""
    from localjob.identity import pod_identity
    from localjob.podspec import PodFactory
    from localjob.ports import free_ports
    from localjob.secrets import read_secret
    from trainer_contract.pod_environment import reserved

    extra_env = _pairs("--env", env)
    for name in sorted(extra_env):
        if reserved(name):
            raise ManifestError(f"--env {name}: set by torchrun or the Job for every process; it cannot be set here")
    provided = {name: read_secret(name, Path(path)) for name, path in _pairs("--secret", secrets).items()}
    job_plan = plan(read_source(source), provided)
    claim_dirs = {claim: Path(directory).resolve() for claim, directory in _pairs("--volume", volumes).items()}
    _check_volumes(claim_dirs, job_plan)
    root = (volume_root or default_volume_root(job_plan.namespace, job_plan.name)).resolve()
    ports = _shared_ports(job_plan, free_ports)
    factory = PodFactory(job_plan, root, claim_dirs, extra_env, ports, image_dir)
    missing = factory.missing_script()
    if missing:
        raise ManifestError(missing)
    new_root = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    needs = [("enter", factory.image_dir), ("enter", root), *(("write", path) for path in claim_dirs.values())]
    try:
        factory.identity = pod_identity(job_plan, allow_root, needs, path_variable=factory.pod_path())
    except ManifestError:
        if new_root:
            root.rmdir()  # refused: nothing of this run is left behind
        raise
    return job_plan, factory, claim_dirs


def _shared_ports(job_plan, free_ports) -> dict[int, int]:
    """The Services' ports, each one port of this machine for every pod: the headless Service's (the gang's
    rendezvous on pod 0), and the replica groups' Lighthouse's, whose groups are each a gang of its own pod (their
    rendezvous ports are each pod's own: PodFactory.pod_ports)."""
    services = [] if job_plan.lighthouse is not None else [job_plan.headless_service or {}]
    if job_plan.lighthouse is not None:
        services.append(job_plan.services.get(job_plan.lighthouse["metadata"]["name"], {}))
    # a Service's port as its pods bind it (a named targetPort is the same number in the render); each pod serves
    # its own metrics, on a port of its own (the Service names it for a ServiceMonitor)
    targets = [int(port["targetPort"]) if isinstance(port.get("targetPort"), int) else int(port["port"])
               for service in services for port in service.get("ports", []) if port.get("name") != PORT_NAME]
    return dict(zip(targets, free_ports(len(targets)), strict=True))


def _report(controller, claim_dirs: dict[str, Path], ended: tuple[bool, str, str], seconds: float) -> int:
    """The Job's end as local-job says it: where each claim's data is, a line per index, the outcome; the exit
    code."""
    from trainer_contract.progress import format_duration

    job_plan, root = controller.plan, controller.root
    complete, reason, message = ended
    for pod_volume in (job_plan.pod_spec.get("volumes") or []):
        if "persistentVolumeClaim" in pod_volume:
            claim = pod_volume["persistentVolumeClaim"]["claimName"]
            controller.note(f"claim {claim}: {claim_dirs.get(claim, root / 'volumes' / claim)}")
    for line in controller.summary():
        controller.note(line)
    took = format_duration(seconds)
    if complete:
        controller.note(f"Job {job_plan.name} complete after {took}: {message}")
        return 0
    controller.note(f"Job {job_plan.name} failed after {took}: {reason}: {message}")
    return EXIT_INTERRUPTED if reason == "Interrupted" else EXIT_FAILED


def default_volume_root(namespace: str, name: str) -> Path:
    """One directory per Job, the same on every run, so that a rerun finds its volumes (and resumes), as a
    claim on a cluster outlives its Job: $XDG_STATE_HOME/local-job/NAMESPACE/NAME (~/.local/state/...)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "local-job" / namespace / name


def _check_volumes(claim_dirs: dict[str, Path], job_plan) -> None:
    """A --volume must name a claim of the Job and an existing directory: a typo would otherwise run the Job on
    an empty new volume (a new directory, or the claim's default one), silently without the user's data."""
    claims = sorted(volume["persistentVolumeClaim"]["claimName"] for volume in job_plan.pod_spec.get("volumes") or []
                    if "persistentVolumeClaim" in volume)
    problems = []
    for claim, directory in sorted(claim_dirs.items()):
        if claim not in claims:
            problems.append(f"--volume {claim}={directory}: the Job has no claim {claim} "
                            f"(its claims: {', '.join(claims) or 'none'})")
        elif not directory.is_dir():
            problems.append(f"--volume {claim}={directory}: no such directory; create it, or name the directory "
                            "that holds the claim's data")
    if problems:
        raise ManifestError(*problems)


def _request(kind: str, volume_root: Path, timeout: float, index: int) -> int:
    from localjob.eviction import EvictionError, request

    try:
        click.echo(f"local-job {kind}: {request(volume_root.resolve(), kind, index, timeout)}")
    except EvictionError as error:
        click.echo(f"local-job {kind}: {error}", err=True)
        return EXIT_FAILED if error.refused else EXIT_REFUSED
    return 0


def _control_request(argument: str):
    """The options and argument `local-job evict`, `delete` (INDEX) and `scale` (COUNT) share."""
    def decorate(function):
        for decorator in reversed((
                click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}),
                click.option("--volume-root", required=True, type=click.Path(file_okay=False, path_type=Path),
                             help="The --volume-root of the running local-job."),
                click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
                             help="Seconds to wait for the running local-job to take the request."),
                click.argument(argument, type=click.IntRange(min=0)))):
            function = decorator(function)
        return function
    return decorate


@_control_request("index")
def evict(volume_root, timeout, index):
    """Evict the running pod of completion INDEX, as a preemption or `kubectl drain` would.

    The pod gets the DisruptionTarget condition and is terminated with its grace period (SIGTERM, then
    SIGKILL); the Job's podFailurePolicy decides what its failure costs (its Ignore rule: nothing). Exit 0 once
    the pod is being evicted, 1 if the local-job refused (no running pod with that index), 2 if no local-job
    runs there.
    """
    return _request("evict", volume_root, timeout, index)


@_control_request("index")
def delete(volume_root, timeout, index):
    """Delete the running pod of completion INDEX, as `kubectl delete pod` would.

    The pod is terminated with its grace period (SIGTERM, then SIGKILL) and no condition: unlike an eviction,
    its failure (exit 143 after a checkpoint) counts against max_restarts as on a cluster. Exit codes as for
    `local-job evict`.
    """
    return _request("delete", volume_root, timeout, index)


@_control_request("count")
def scale(volume_root, timeout, count):
    """Scale the running Job of replica groups to COUNT pods, as `./run.sh --scale` patches it on a cluster.

    Its completions and parallelism become COUNT together (an Elastic Indexed Job), maxFailedIndexes the groups
    above MIN_REPLICAS; COUNT from MIN_REPLICAS to MAX_REPLICAS (fault_tolerance.max_replicas). New indexes get
    pods, whose groups join the next quorum; the pods of indexes now out of range (the highest) are terminated and
    never replaced. Exit codes as for `local-job evict`.
    """
    return _request("scale", volume_root, timeout, count)


def job_root(source: str | None, volume_root: Path | None) -> Path:
    """The volume root of a Job: --volume-root, else the default one of the Job in MANIFESTS."""
    if volume_root is not None:
        return volume_root.resolve()
    if source is None:
        raise click.UsageError("name the Job's manifests (as given to local-job) or its --volume-root")
    metadata = jobs_of(read_source(source))[0].get("metadata") or {}
    return default_volume_root(metadata.get("namespace", "default"), metadata["name"]).resolve()


_ROOT_OPTION = click.option("--volume-root", type=click.Path(file_okay=False, path_type=Path),
                            help="The --volume-root the Job ran with (default: the Job's own, from MANIFESTS).")


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("source", required=False, metavar="[MANIFESTS]")
@_ROOT_OPTION
@click.option("--wait", is_flag=True, help="Say the lines at each change until the Job ends; exit 0 when it is "
              "Complete, 1 when it failed or its local-job is gone (as `python -m status_views.kubernetes --wait`).")
def status(source, volume_root, wait):
    """The running (or last) local run of the Job: its state, each index's pods with exit codes and what they
    mean, index 0's latest progress line with its ETA, the launcher's warnings and the last error. Exit 0 when
    a status was found, 1 when there is none."""
    from localjob.status import NoStatus, read_state
    from status_views.view import follow

    root = job_root(source, volume_root)
    try:
        if wait:
            return follow(lambda: read_state(root), 2.0, lambda line: click.echo(line, err=True), f"the Job in {root}")
        click.echo("\n".join(read_state(root).lines))
    except NoStatus as error:
        click.echo(f"local-job status: {error}", err=True)
        return EXIT_FAILED
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("source", required=False, metavar="[MANIFESTS]")
@_ROOT_OPTION
@click.option("--keep-data", is_flag=True,
              help="Keep each claim's data/ directory (where the built-in worker downloads MNIST).")
def clean(source, volume_root, keep_data):
    """Remove what local-job keeps for the Job in its volume root: the claims' volumes (checkpoints, snapshots,
    results), the pods' directories and logs, the status. A directory given with --volume CLAIM=DIR is the
    user's and never touched. Refused while a local-job runs there."""
    from localjob.cleaning import CleanError, clean_root

    root = job_root(source, volume_root)
    try:
        for line in clean_root(root, keep_data):
            click.echo(f"local-job clean: {line}")
    except CleanError as error:
        click.echo(f"local-job clean: {error}", err=True)
        return EXIT_FAILED
    return 0


SUBCOMMANDS = {"evict": evict, "delete": delete, "scale": scale, "status": status, "clean": clean}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, name = local_job, "local-job"
    if argv[:1] and argv[0] in SUBCOMMANDS:
        command, name, argv = SUBCOMMANDS[argv[0]], f"local-job {argv[0]}", argv[1:]
    try:
        code = command.main(args=argv, prog_name=name, standalone_mode=False)
    except ManifestError as error:
        for problem in error.problems:
            click.echo(f"local-job: cannot run these manifests: {problem}", err=True)
        sys.exit(EXIT_REFUSED)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Abort:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code or 0)
