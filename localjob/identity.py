"""Who a pod's processes run as here, and what of its securityContext this machine cannot enforce.

A kubelet runs a container as its securityContext's runAsUser/runAsGroup (the image's user without one), adds
fsGroup and supplementalGroups, gives the claims' files to fsGroup, and refuses to start a container with
``runAsNonRoot: true`` that would run as uid 0 (CreateContainerConfigError). local-job does what it can of that:

- run as root, it starts each container as the user the securityContext names, with its groups, once a probe
  as that user finds the command, the image directory, the volume root and every claim directory reachable;
  a user who cannot reach them (a Python under root's home, a volume root in a private directory) would fail
  mid-start, so it says which path is unreachable before any pod starts;
- run as anyone else, it cannot change users: the pods run as the caller, and it says so when the pods name
  another user;
- a pod that would run as root although it says ``runAsNonRoot: true`` is refused unless ``--allow-root``;
- ``allowPrivilegeEscalation: false`` becomes the no_new_privs flag of every process of the pod (a setuid
  program gains nothing), as runc sets it; a read-only root filesystem, a seccomp profile and capabilities
  other than those a non-root user lacks anyway are not emulable on processes of this machine: said once.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from localjob.manifests import JobPlan, ManifestError

_PR_SET_NO_NEW_PRIVS = 38  # linux/prctl.h
_prctl = ctypes.CDLL(None, use_errno=True).prctl

# Each path the pod needs, checked by a shell running as the pod's user: the exit status of `test` is the
# kernel's own answer (traversal of every parent directory included), which no stat() of ours would equal.
_PROBE = r'''
for want in "$@"; do
  kind=${want%%:*} path=${want#*:}
  case $kind in
    exec) [ -f "$path" ] && [ -x "$path" ] ;;
    enter) [ -d "$path" ] && [ -x "$path" ] ;;
    write) [ -d "$path" ] && [ -x "$path" ] && [ -w "$path" ] ;;
  esac || printf '%s\0' "$want"
done
'''
_NEEDS = {"exec": "execute", "enter": "enter", "write": "write in"}


@dataclass(frozen=True)
class RunAs:
    """A user to switch to (local-job runs as root): Popen's user, group and extra_groups."""
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    def popen_arguments(self) -> dict:
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}

    def describe(self) -> str:
        groups = f", groups {' '.join(map(str, self.groups))}" if self.groups else ""
        return f"uid {self.uid}, gid {self.gid}{groups}"


@dataclass
class PodIdentity:
    """How every container of the Job's pods starts: as ``run_as`` (None: as local-job itself), with
    ``no_new_privileges``; ``fs_group`` owns the claim directories local-job makes; ``notes`` say, once per run,
    what of the securityContext is not as on a cluster."""
    run_as: RunAs | None = None
    no_new_privileges: bool = False
    fs_group: int | None = None
    notes: list[str] = field(default_factory=list)

    def hand_over(self, path: Path, shared: bool = False) -> None:
        """Make a directory local-job created for the pods theirs: a claim's (``shared``) as a kubelet does with
        fsGroup (its group, group-writable, new files inheriting the group), a pod's own to its user."""
        if self.run_as is None:
            return
        if shared and self.fs_group is not None:
            if path.stat().st_gid != self.fs_group:  # fsGroupChangePolicy OnRootMismatch: only when it differs
                for place in [path, *path.rglob("*")]:
                    if not place.is_symlink():
                        os.chown(place, -1, self.fs_group)
                        os.chmod(place, place.stat().st_mode | (0o2070 if place.is_dir() else 0o060))
            return
        if shared:  # no fsGroup: the claim's top directory becomes the user's, its files stay whose they are
            if path.stat().st_uid != self.run_as.uid:
                os.chown(path, self.run_as.uid, self.run_as.gid)
            return
        os.chown(path, self.run_as.uid, self.run_as.gid)
        for place in path.rglob("*"):
            if not place.is_symlink():
                os.chown(place, self.run_as.uid, self.run_as.gid)

    def in_child(self) -> None:
        """Before the container's command runs (in the child, after fork): what the runtime would set. prctl was
        looked up in the parent: a dlopen after fork could wait forever on a lock another thread held."""
        if self.no_new_privileges and _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def effective_context(plan: JobPlan, container: dict) -> dict:
    """The container's securityContext over the pod's, as the kubelet merges the fields both can hold."""
    pod = plan.pod_spec.get("securityContext") or {}
    own = container.get("securityContext") or {}
    merged = {key: pod[key] for key in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile") if key in pod}
    merged.update(own)
    return merged


def _containers(plan: JobPlan) -> list[dict]:
    return list(plan.pod_spec.get("initContainers") or []) + list(plan.pod_spec["containers"])


def pod_identity(plan: JobPlan, allow_root: bool, needs: list[tuple[str, Path]], euid: int | None = None,
                 path_variable: str | None = None) -> PodIdentity:
    """Decide who the pods run as; ManifestError (nothing started) for a pod that cannot run as it says.

    ``needs``: (what, path) pairs the pods' user must reach, besides each container's command: ("enter", the
    image directory), ("enter", the volume root), ("write", a claim directory given with --volume)."""
    euid = os.geteuid() if euid is None else euid
    contexts = [(container.get("name", "container"), effective_context(plan, container))
                for container in _containers(plan)]
    users = {context.get("runAsUser") for _, context in contexts}
    groups = {context.get("runAsGroup") for _, context in contexts}
    non_root = any(context.get("runAsNonRoot") for _, context in contexts)
    pod_context = plan.pod_spec.get("securityContext") or {}
    fs_group = pod_context.get("fsGroup")
    identity = PodIdentity(no_new_privileges=all(context.get("allowPrivilegeEscalation") is False
                                                 for _, context in contexts),
                           notes=_not_emulable(contexts))
    for name, context in contexts:
        if context.get("runAsNonRoot") and context.get("runAsUser") == 0:
            raise ManifestError(f"container {name}: runAsNonRoot with runAsUser 0 (a kubelet refuses this pod too: "
                                "CreateContainerConfigError); set security.run_as_user to a uid other than 0")
    if len(users) > 1 or len(groups) > 1:
        raise ManifestError("the containers name different users (runAsUser/runAsGroup): local-job runs every "
                            "container of a pod as one user; give them the same securityContext user")
    uid, gid = users.pop(), groups.pop()
    if euid != 0:
        if uid is not None and uid != euid:
            identity.notes.append(f"runAsUser {uid}: the pods run as you (uid {euid}): only root can start "
                                  "processes as another user")
        return identity
    if uid is None or uid == 0:
        if non_root and not allow_root:
            raise ManifestError("runAsNonRoot: the pods name no runAsUser, so they would run as root, as local-job "
                                "does; set security.run_as_user, run local-job as another user, or pass "
                                "--allow-root to run them as root")
        if non_root:
            identity.notes.append("the pods run as root (--allow-root): runAsNonRoot is not enforced")
        identity.notes.extend(_kept_capabilities(contexts))
        return identity
    run_as = RunAs(uid, uid if gid is None else gid,
                   tuple(sorted({*([fs_group] if fs_group is not None else []),
                                 *(pod_context.get("supplementalGroups") or [])})))
    _switch(identity, run_as, fs_group, plan, needs, path_variable, allow_root, non_root, contexts)
    return identity


def _switch(identity: PodIdentity, run_as: RunAs, fs_group: int | None, plan: JobPlan, needs: list[tuple[str, Path]],
            path_variable: str | None, allow_root: bool, non_root: bool, contexts: list[tuple[str, dict]]) -> None:
    """Run as root: the pods become ``run_as`` once a probe finds everything they need reachable for that user;
    else refused, or (--allow-root) left as root, said in the notes."""
    commands = [("exec", _command_path(container, path_variable)) for container in _containers(plan)]
    unreachable = probe(run_as, [(what, path) for what, path in commands + needs if path is not None])
    if not unreachable:
        identity.run_as, identity.fs_group = run_as, fs_group
        identity.notes.append(f"the pods run as {run_as.describe()} (their securityContext)")
        return
    what, path = unreachable[0]
    real = path.resolve()
    shown = f"{path} ({real})" if real != path else str(path)
    why = f"uid {run_as.uid} (securityContext.runAsUser), which cannot {_NEEDS[what]} {shown}"
    if not allow_root:
        raise ManifestError(f"the pods would run as {why}; make it reachable for that user, run local-job as "
                            "that user, or pass --allow-root (LOCAL_JOB_ALLOW_ROOT=1) to run the pods as root")
    identity.notes.append(f"the pods run as root (--allow-root): {why}; runAsUser"
                          f"{' and runAsNonRoot are' if non_root else ' is'} not enforced")
    identity.notes.extend(_kept_capabilities(contexts))


def _command_path(container: dict, path_variable: str | None) -> Path | None:
    """The executable the container's command names, found on the PATH the pod gets (None: not found; the
    container then fails as it would in an image without it)."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if not argv:
        return None
    found = shutil.which(argv[0], path=path_variable)
    return Path(found) if found else None


def probe(run_as: RunAs, needs: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """The needs the user cannot meet, found by a shell running as that user."""
    if not needs:
        return []
    result = subprocess.run(["/bin/sh", "-c", _PROBE, "probe", *(f"{what}:{path}" for what, path in needs)],
                            capture_output=True, env={"PATH": "/usr/bin:/bin"}, timeout=30, cwd="/",
                            **run_as.popen_arguments())
    failed = [entry.decode(errors="replace") for entry in result.stdout.split(b"\0") if entry]
    return [(entry.partition(":")[0], Path(entry.partition(":")[2])) for entry in failed]


def _kept_capabilities(contexts: list[tuple[str, dict]]) -> list[str]:
    """Run as root, the pods keep root's capabilities whatever they drop (a non-root user has none to drop)."""
    if any((context.get("capabilities") or {}).get("drop") for _, context in contexts):
        return ["securityContext capabilities.drop: not enforced for pods running as root"]
    return []


def _not_emulable(contexts: list[tuple[str, dict]]) -> list[str]:
    """The set fields no process of this machine can be held to, in one line."""
    fields = []
    if any(context.get("readOnlyRootFilesystem") for _, context in contexts):
        fields.append("readOnlyRootFilesystem (the pods can write wherever their user may)")
    if any(context.get("seccompProfile") for _, context in contexts):
        fields.append("seccompProfile")
    if any((context.get("capabilities") or {}).get("add") for _, context in contexts):
        fields.append("capabilities.add")
    if any(context.get("seLinuxOptions") or context.get("appArmorProfile") for _, context in contexts):
        fields.append("seLinuxOptions/appArmorProfile")
    return [f"securityContext: {', '.join(fields)}: not enforced here"] if fields else []
