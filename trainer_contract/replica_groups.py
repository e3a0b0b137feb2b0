"""Replica groups, read without torch: the variables that make each pod (Kubernetes) or node (Slurm) one replica
group of a job whose groups keep stepping when another fails (torchft), and how a step's examples are shared.

Within a group its processes train as one gang, as without replica groups; across groups the model is replicated
and a Lighthouse (torchft's) forms a quorum of the groups at every step. A group that fails costs that group: the
others go on stepping, and it rejoins a later quorum taking the weights from a peer.

    REPLICA_GROUP       this group's index (the pod's completion index), 0..MAX_REPLICAS-1
    REPLICA_GROUPS      the job's groups as submitted: a step's examples are BATCH_SIZE x processes per group x this
                        many, shared by the groups in the step's quorum, whichever and however many they are (a
                        job scaled to more or fewer groups keeps its steps, so its schedule and its data)
    MAX_REPLICAS        the most groups the job may be scaled to (default REPLICA_GROUPS): REPLICA_GROUP is below it
    MIN_REPLICAS        the fewest groups that step (default 1); fewer wait for the next quorum
    TORCHFT_LIGHTHOUSE  the Lighthouse's address (torchft's own variable): http://HOST:PORT
    REPLICA_GROUP_HOST  the name the other groups reach this group's pod by (its manager, its store, the state a
                        joining group takes from it); default: the host's name, which a Kubernetes pod's peers
                        cannot resolve (the render sets <job>-<index>.<service>)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from trainer_contract.launcher import BUILT_IN_WORKER
from trainer_contract.settings import ConfigError

GROUP = "REPLICA_GROUP"
GROUPS = "REPLICA_GROUPS"
MIN_REPLICAS = "MIN_REPLICAS"
MAX_REPLICAS = "MAX_REPLICAS"
LIGHTHOUSE = "TORCHFT_LIGHTHOUSE"
HOST = "REPLICA_GROUP_HOST"

_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")

# The Lighthouse's port: the render's Service, local-job and the Slurm script serve it there.
LIGHTHOUSE_PORT = 29510
# Each group is a gang of one pod (node): its torchrun's store is on itself, on every interface, where the other
# groups reach it at REPLICA_GROUP_HOST.
GROUP_STORE_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class ReplicaGroups:
    group: int  # this group's index
    groups: int  # the job's groups
    min_replicas: int  # the fewest that step
    lighthouse: str  # the Lighthouse's address
    host: str | None = None  # how the other groups reach this one; None: the host's name
    max_replicas: int = 0  # the most groups the job may be scaled to (from_environ: MAX_REPLICAS, else groups)

    @property
    def replica_id(self) -> str:
        """This group's name at the Lighthouse: torchft reads a group's index from its name's trailing digits."""
        return f"group{self.group}"


# The finished run's summary names the group that wrote the model: that group's launcher alone uploads the export.
WRITER = "written_by_group"


def written_by(groups: ReplicaGroups) -> dict[str, int]:
    """What the summary of a run whose model this group wrote records of it."""
    return {WRITER: groups.group}


def uploads_the_export(summary: Mapping[str, Any] | None, environ: Mapping[str, str]) -> bool:
    """Whether this pod uploads the finished run's export: always without replica groups; with them only the pod of
    the group that wrote the model (its summary says so), not every one of a thousand groups."""
    if not environ.get(GROUPS, "").strip():
        return True
    return summary is not None and str(summary.get(WRITER)) == environ.get(GROUP, "0").strip()


# The built-in programs that run as replica groups (their module), and the strategies a group trains with, its last
# the program's default: the groups replicate what each group holds (fsdp shards the model within a group, hsdp is
# fsdp there since a group is one node)
REPLICATED_PROGRAMS = {BUILT_IN_WORKER: ("allreduce", "ddp"), "worker.finetune": ("ddp",),
                       "worker.sft": ("fsdp", "hsdp", "ddp")}


def program_problem(module: str | None, shown: str) -> str | None:
    """Why the program ``shown`` (a built-in one's ``module``, else None) does not run as replica groups, or None
    where it does."""
    if module in REPLICATED_PROGRAMS:
        return None
    names = [f"python -m {name}" for name in REPLICATED_PROGRAMS]
    return f"{', '.join(names[:-1])} and {names[-1]} run as replica groups, not yet {shown}"


def setting_problems(module: str, config: Any) -> list[str]:
    """What of a replicated program's settings ``config`` its groups cannot run with, each ``VARIABLE: why`` (the
    render names config_map.VARIABLE; a start, the variable)."""
    problems = []
    strategies = REPLICATED_PROGRAMS[module]
    strategy = getattr(config, "strategy", strategies[-1])
    if strategy not in strategies:
        problems.append(f"STRATEGY: {strategy} with replica groups: the groups replicate what each holds; use "
                        f"{', '.join(strategies[:-1]) + ' or ' if len(strategies) > 1 else ''}{strategies[-1]}")
    if not config.resume:
        problems.append("RESUME: false with replica groups: a group that restarts would set aside what the others "
                        "train; give the new run another OUTPUT_DIR instead")
    if getattr(config, "precision", "fp32") == "fp16":
        problems.append("PRECISION: fp16 with replica groups: a gradient scaler's skipped steps are not agreed "
                        "across the groups; use bf16")
    if getattr(config, "metric_for_best_model", "none") != "none":
        problems.append("METRIC_FOR_BEST_MODEL with replica groups: the best checkpoint is kept by one gang's "
                        "evaluations; leave it none (the last model is exported)")
    return problems


def _whole(environ: Mapping[str, str], name: str, least: int, problems: list[str]) -> int:
    raw = environ.get(name, "").strip()
    try:
        value = int(raw)
    except ValueError:
        problems.append(f"{name}: {raw!r} must be a whole number of {least} or more")
        return least
    if value < least:
        problems.append(f"{name}: {raw!r} must be {least} or more")
    return value


def from_environ(environ: Mapping[str, str]) -> ReplicaGroups | None:
    """This process's replica groups; None where REPLICA_GROUPS is unset or empty (the job is one gang).
    ConfigError naming each wrong variable."""
    if not environ.get(GROUPS, "").strip():
        return None
    problems: list[str] = []
    groups, min_replicas, most = _sizes(environ, problems)
    group = _whole(environ, GROUP, 0, problems)
    if not problems and most < groups:
        problems.append(f"{MAX_REPLICAS}: {most} must be at least {GROUPS} ({groups})")
    if not problems and group >= most:
        problems.append(f"{GROUP}: {group} must be below {MAX_REPLICAS} ({most})" if most > groups
                        else f"{GROUP}: {group} must be below {GROUPS} ({groups})")
    if not problems and min_replicas > groups:
        problems.append(f"{MIN_REPLICAS}: {min_replicas} must be at most {GROUPS} ({groups})")
    lighthouse = environ.get(LIGHTHOUSE, "").strip()
    if not _is_address(lighthouse):
        problems.append(f"{LIGHTHOUSE}: {lighthouse!r} must be the Lighthouse's http://HOST:PORT (set with {GROUPS})")
    host = environ.get(HOST, "").strip() or None
    if host is not None and not _is_host(host):
        problems.append(f"{HOST}: {host!r} must be a host name (letters, digits, '-' and '.') or an IPv4 address")
    if problems:
        raise ConfigError(problems)
    return ReplicaGroups(group, groups, min_replicas, lighthouse, host, most)


def scaled(count: int, min_replicas: int, max_replicas: int) -> dict[str, int]:
    """The Job's fields for ``count`` groups, set together (an Elastic Indexed Job: completions equal to
    parallelism) with the indexes that may fail: the groups above min_replicas, and never all but one, since the
    Job controller judges failed indexes before its success policy (a Job whose every other index has failed fails
    when its last group succeeds). ValueError naming the bound ``count`` is outside."""
    if not min_replicas <= count <= max_replicas:
        raise ValueError(f"{count} groups is outside the job's bounds: from fault_tolerance.min_replicas "
                         f"({min_replicas}) to fault_tolerance.max_replicas ({max_replicas})")
    return {"completions": count, "parallelism": count,
            "maxFailedIndexes": max(0, count - max(min_replicas, 2))}


def bounds_of(environment: Mapping[str, str]) -> tuple[int, int] | None:
    """(MIN_REPLICAS, MAX_REPLICAS) of a job's environment (its ConfigMap), or None where it is not replica groups;
    ConfigError where they are not numbers."""
    if not environment.get(GROUPS, "").strip():
        return None
    problems: list[str] = []
    _, least, most = _sizes(environment, problems)
    if problems:
        raise ConfigError(problems)
    return least, most


def _sizes(environ: Mapping[str, str], problems: list[str]) -> tuple[int, int, int]:
    """REPLICA_GROUPS, MIN_REPLICAS (default 1) and MAX_REPLICAS (default REPLICA_GROUPS), each wrong one in
    ``problems``."""
    groups = _whole(environ, GROUPS, 1, problems)
    least = _whole(environ, MIN_REPLICAS, 1, problems) if environ.get(MIN_REPLICAS, "").strip() else 1
    most = _whole(environ, MAX_REPLICAS, 1, problems) if environ.get(MAX_REPLICAS, "").strip() else groups
    return groups, least, most


def node_rank_of(environ: Mapping[str, str], index: int) -> int:
    """The node rank of the pod of completion index ``index``: the index, or 0 in a replica group (each pod is a
    gang of its own)."""
    return 0 if environ.get(GROUPS, "").strip() else index


def _is_host(text: str) -> bool:
    """A DNS name or an IPv4 address (an IPv6 address would need brackets in torchft's URLs)."""
    return len(text) <= 253 and all(_LABEL.match(label) for label in text.removesuffix(".").split("."))


def _is_address(text: str) -> bool:
    try:
        parsed = urlparse(text)
        return parsed.scheme in ("http", "https") and bool(parsed.hostname) and parsed.port is not None \
            and parsed.path in ("", "/") and not (parsed.query or parsed.fragment or parsed.username)
    except ValueError:  # a port out of range
        return False


def share_of(count: int, parts: int, part: int) -> tuple[int, int]:
    """The ``[start, stop)`` of part ``part`` of ``parts`` of ``count`` examples: contiguous, in order, sizes that
    differ by at most one (the first ``count % parts`` parts one larger). Every example is in exactly one part."""
    if not 0 <= part < parts:
        raise ValueError(f"part {part} of {parts}")
    size, larger = divmod(count, parts)
    start = part * size + min(part, larger)
    return start, start + size + (1 if part < larger else 0)


# A group whose process died stops heartbeating: after this long the Lighthouse forms quorums without it, so the
# survivors of a two-group job wait about this long, not torchft's 5 s (heartbeats go every 100 ms).
HEARTBEAT_TIMEOUT_MS = 1000
# How long a quorum waits for a group that heartbeats but has not asked to join (it is still setting up): its
# manager starts once its model is built, so this is short.
JOIN_TIMEOUT_MS = 1000


def lighthouse_command(min_replicas: int, port: int = LIGHTHOUSE_PORT) -> list[str]:
    """torchft's Lighthouse, as the render's Deployment, local-job and the Slurm script run it."""
    return ["torchft_lighthouse", f"--min_replicas={min_replicas}", f"--bind=[::]:{port}",
            f"--join_timeout_ms={JOIN_TIMEOUT_MS}", f"--heartbeat_timeout_ms={HEARTBEAT_TIMEOUT_MS}"]
