"""What Kubernetes would give one pod of the Job, translated to this machine.

Environment: the container's env and envFrom (from the rendered ConfigMaps), the Downward API fields it can
resolve, then kubelet's $(VAR) expansion of env values, command and args. Network: every pod is 127.0.0.1,
so the headless Service's names (<job>-<i>.<service>[.<namespace>[.svc[.cluster.local]]]) are rewritten to
127.0.0.1 and the Service's ports to a free port of this machine (two local jobs never collide); every other
port the container declares (its metrics) to a free port of each pod's own, recorded in the status. Storage:
each volume is a local directory (claims shared by all pods, emptyDirs per pod) and mount paths in env values
and arguments are rewritten to it; Secrets (local-job --secret) become env values and files, never printed.
Image: the command runs from the PATH of local-job's own environment, in the directory standing for the
image's working directory (--image-dir, by default where local-job was started); the container's workingDir
is rewritten to it, so a user's ``train.py`` beside them runs as it would in their image. Identity: each pod has a
HOME of its own under the run's root, never the caller's; who its processes run as is localjob/identity.py's.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import site
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from localjob.expansion import expand
from localjob.identity import PodIdentity
from localjob.manifests import JobPlan
from localjob.ports import free_port
from trainer_contract.metrics import ADDRESS_VARIABLE as METRICS_ADDRESS_VARIABLE
from trainer_contract.names import INDEX_LABEL, JOB_NAME_LABEL, JOB_UID_LABEL, pod_address, pod_hostname
from trainer_contract.quantities import divide_round_up, parse_quantity

POD_MARKER = "LOCAL_JOB_POD_UID"  # every process of a pod inherits it; it is how a pod's processes are found
# What a shell's environment may lend a pod: the locale and the terminal, never HOME (the caller's credentials
# live there: ~/.aws, ~/.netrc, the Hub's token) nor the caller's name; each pod gets a HOME of its own.
_PASSTHROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")


@dataclass
class ContainerRun:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    identity: PodIdentity = field(default_factory=PodIdentity)


@dataclass
class PodRun:
    name: str
    uid: str
    index: int
    init_containers: list[ContainerRun]
    container: ContainerRun
    cpu_limit: int
    ports: dict[str, int] = field(default_factory=dict)  # the container's named ports -> this machine's


_LAUNCHERS = (["torchrun"], ["python", "-m", "worker.launch"], ["python3", "-m", "worker.launch"])


def training_script(argv: list[str]) -> str | None:
    """The script torchrun (or the indexed-trainer launcher) runs: the first argument after its --flag=value
    options, if it names a .py file; None for a module (-m), another command, or a flag whose value is the
    next argument (then which argument is the script is not certain)."""
    launcher = next((prefix for prefix in _LAUNCHERS if argv[:len(prefix)] == prefix), None)
    if launcher is None:
        return None
    for token in argv[len(launcher):]:
        if token in ("-m", "--module", "--no-python", "--no_python") or (token.startswith("-") and "=" not in token):
            return None
        if not token.startswith("-"):
            return token if token.endswith(".py") else None
    return None


def machine_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


class PodFactory:
    """Builds PodRuns for a Job plan; holds what all its pods share (ports, volume directories)."""

    def __init__(self, plan: JobPlan, root: Path, claim_dirs: dict[str, Path], extra_env: dict[str, str],
                 ports: dict[int, int], image_dir: Path | None = None):
        self.plan, self.root, self.extra_env, self.ports = plan, root, extra_env, ports
        self.claim_dirs = claim_dirs
        self.image_dir = (image_dir or Path.cwd()).resolve()
        self.bin_dir = str(Path(sys.executable).parent)
        self.job_uid = f"local-{plan.name}-{secrets.token_hex(8)}"  # the Job's uid: its pods' controller-uid label
        self.identity = PodIdentity()  # who the pods run as: localjob/identity.py decides, before the first pod

    # -- names --------------------------------------------------------------------------------------
    def hostnames(self) -> dict[str, str]:
        """Every DNS name of every pod of the Job -> 127.0.0.1, longest first."""
        job, namespace = self.plan.name, self.plan.namespace
        subdomain = self.plan.pod_spec.get("subdomain")
        if not subdomain:
            return {}
        names = {}
        hosts = [pod_address(job, index, subdomain) for index in range(self.plan.completions)]
        if self.plan.lighthouse is not None:  # the replica groups' Lighthouse, through its Service
            hosts.append(self.plan.lighthouse["metadata"]["name"])
        for host in hosts:
            for suffix in ("", f".{namespace}", f".{namespace}.svc", f".{namespace}.svc.cluster.local"):
                names[host + suffix] = "127.0.0.1"
        return dict(sorted(names.items(), key=lambda item: -len(item[0])))

    def lighthouse_command(self) -> list[str]:
        """The Lighthouse Deployment's command as it runs here: its binary from local-job's environment, its port
        this machine's."""
        assert self.plan.lighthouse is not None
        container = self.plan.lighthouse["spec"]["template"]["spec"]["containers"][0]
        command = [*container["command"], *(container.get("args") or [])]
        return [str(Path(self.bin_dir) / command[0]), *(self.rewrite(part, {}) for part in command[1:])]

    def rewrite(self, text: str, mounts: dict[str, Path], ports: dict[int, int] | None = None) -> str:
        """Map cluster names, ports (``ports``: the pod's; default the Service's) and mount paths inside one env
        value or argument to their local ones."""
        for host, address in self.hostnames().items():
            text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w.-])", address, text)
        for cluster_port, local_port in (self.ports if ports is None else ports).items():
            if text == str(cluster_port):
                text = str(local_port)
            text = re.sub(rf"(?<=[=:]){cluster_port}(?!\d)", str(local_port), text)
        if mounts:
            # one pass over all mount paths (longest first), so a rewritten path is never rewritten again
            by_path = {path.rstrip("/"): str(local) for path, local in mounts.items()}
            pattern = "|".join(re.escape(path) for path in sorted(by_path, key=len, reverse=True))
            text = re.sub(rf"(?<![\w.-])({pattern})(?=/|$|[^\w.-])", lambda m: by_path[m.group(1)], text)
        return text

    # -- volumes ------------------------------------------------------------------------------------
    def secret_dir(self, pod_name: str) -> Path:
        """Where a pod's secret volumes live while it runs (removed when it ends, as the kubelet's tmpfs goes)."""
        return self.root / "pods" / pod_name / "secrets"

    def volume_dir(self, volume: dict, pod_name: str) -> Path:
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            directory = self.claim_dirs.get(claim, self.root / "volumes" / claim)
        elif "secret" in volume:
            directory = self.secret_dir(pod_name) / volume["name"]
        else:
            directory = self.root / "pods" / pod_name / "volumes" / volume["name"]
        directory.mkdir(parents=True, exist_ok=True, mode=0o700 if "secret" in volume else 0o777)
        if "configMap" in volume:
            for key, value in self.plan.config_maps[volume["configMap"]["name"]].items():
                (directory / key).write_text(value)
        if "secret" in volume:
            for key, value in self.plan.secrets.get(volume["secret"]["secretName"], {}).items():
                fd = os.open(directory / key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as handle:
                    handle.write(value)
        if "persistentVolumeClaim" in volume:
            if directory not in self.claim_dirs.values():  # a --volume directory is the user's: never changed
                self.identity.hand_over(directory, shared=True)
        else:  # the pod's own (an emptyDir, its secrets): its user's, no one else's
            self.identity.hand_over(directory)
        return directory

    # -- env ----------------------------------------------------------------------------------------
    def field_value(self, path: str, pod: dict) -> str:
        simple = {"metadata.name": pod["name"], "metadata.namespace": self.plan.namespace,
                  "metadata.uid": pod["uid"], "spec.nodeName": "localhost", "status.podIP": "127.0.0.1",
                  "status.hostIP": "127.0.0.1",
                  "spec.serviceAccountName": self.plan.pod_spec.get("serviceAccountName", "default")}
        if path in simple:
            return simple[path]
        match = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
        return pod[match.group(1)].get(match.group(2), "") if match else ""

    def resource_value(self, ref: dict, container: dict) -> str:
        kind, _, resource = ref["resource"].partition(".")
        wanted = ref.get("containerName") or container.get("name")
        everyone = (self.plan.pod_spec.get("initContainers") or []) + self.plan.pod_spec["containers"]
        source = next((c for c in everyone if c.get("name") == wanted), container)
        amounts = source.get("resources", {}).get(kind, {})
        if resource in amounts:
            amount = parse_quantity(amounts[resource])
        elif resource == "cpu":  # no limit: the node's allocatable CPUs
            amount = Decimal(len(machine_cores()))
        else:
            amount = Decimal(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        return str(divide_round_up(amount, parse_quantity(ref.get("divisor", "1"))))

    def container_env(self, container: dict, pod: dict, mounts: dict[str, Path],
                      ports: dict[int, int] | None = None) -> dict[str, str]:
        env: dict[str, str] = {}
        secret = set()  # taken from a Secret: passed as they are (never rewritten, never printed)
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "secretRef" in source:
                data = self.plan.secrets.get(source["secretRef"]["name"], {})
            else:
                data = self.plan.config_maps.get(source["configMapRef"]["name"], {})
            for key, value in data.items():
                env[prefix + key] = value
                secret.discard(prefix + key)
                if "secretRef" in source:
                    secret.add(prefix + key)
        for variable in container.get("env") or []:
            value_from = variable.get("valueFrom")
            name = variable["name"]
            secret.discard(name)
            if value_from is None:
                value = expand(str(variable.get("value", "")), env)
            elif "fieldRef" in value_from:
                value = self.field_value(value_from["fieldRef"]["fieldPath"], pod)
            elif "resourceFieldRef" in value_from:
                value = self.resource_value(value_from["resourceFieldRef"], container)
            else:
                kind = "secretKeyRef" if "secretKeyRef" in value_from else "configMapKeyRef"
                ref = value_from[kind]
                source = (self.plan.secrets if kind == "secretKeyRef" else self.plan.config_maps).get(ref["name"], {})
                if ref["key"] not in source:
                    env.pop(name, None)
                    continue  # optional and missing: the variable is not set, as on a cluster
                value = source[ref["key"]]
                if kind == "secretKeyRef":
                    secret.add(name)
            env[name] = value
        return {key: value if key in secret else self.rewrite(value, mounts, ports) for key, value in env.items()}

    def missing_script(self) -> str | None:
        """Why the main container's training script cannot start here (it is not in the image directory), or
        None: found before any pod starts, not after a gang's worth of start-up lines."""
        container = self.plan.pod_spec["containers"][0]
        script = training_script(list(container.get("command") or []) + list(container.get("args") or []))
        if script is None or "$(" in script:
            return None
        working = (container.get("workingDir") or "").rstrip("/")
        if script.startswith("/"):
            if not working or not script.startswith(working + "/"):
                return None  # elsewhere in the image: nothing here stands for it
            script = script[len(working) + 1:]
        if (self.image_dir / script).is_file():
            return None
        return (f"the container runs the script {script}, which is not in the image directory {self.image_dir}; "
                "give the directory that holds it with --image-dir, or correct entrypoint.script")

    def release(self, run: PodRun) -> None:
        """The pod has ended: its secret volumes go (a kubelet keeps them in memory only while the pod runs)."""
        shutil.rmtree(self.secret_dir(run.name), ignore_errors=True)

    # -- the pod ------------------------------------------------------------------------------------
    def pod_ports(self) -> dict[int, int]:
        """The pod's ports on this machine: the Service's, shared (only the pod that serves one binds it), and
        each other port the container declares (its metrics; with replica groups its gang's own rendezvous too), a
        free port of its own: on a cluster every pod has its own network namespace, here they share one."""
        ports = dict(self.ports)
        for declared in self.plan.pod_spec["containers"][0].get("ports") or []:
            ports.setdefault(int(declared["containerPort"]), free_port(frozenset(ports.values())))
        return ports

    def container_run(self, container: dict, pod: dict, ports: dict[int, int] | None = None) -> ContainerRun:
        volumes = {v["name"]: v for v in self.plan.pod_spec.get("volumes") or []}
        mounts = {m["mountPath"]: self.volume_dir(volumes[m["name"]], pod["name"])
                  for m in container.get("volumeMounts") or []}
        if container.get("workingDir"):
            mounts.setdefault(container["workingDir"], self.image_dir)
        declared = self.container_env(container, pod, mounts, ports)
        base = {key: os.environ[key] for key in _PASSTHROUGH if key in os.environ}
        base["PATH"] = self.pod_path()
        base["HOSTNAME"] = pod["hostname"]
        base["HOME"] = str(self.home_dir(pod["name"]))
        if self.identity.run_as is None and site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
            base["PYTHONUSERBASE"] = site.getuserbase()  # what `pip install --user` put there stays importable
        if "/tmp" in mounts:
            base["TMPDIR"] = str(mounts["/tmp"])
        # the pods share this machine's network: their metrics endpoints stay on its loopback, off the LAN
        env = {**base, **self.extra_env, **declared, METRICS_ADDRESS_VARIABLE: "127.0.0.1", POD_MARKER: pod["uid"]}
        argv = [self.rewrite(expand(part, declared), mounts, ports)
                for part in list(container.get("command") or []) + list(container.get("args") or [])]
        return ContainerRun(container.get("name", "container"), argv, env, self.image_dir, self.identity)

    def pod_path(self) -> str:
        """The PATH every container gets: local-job's own environment first, as the image's would be."""
        return f"{self.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"

    def home_dir(self, pod_name: str) -> Path:
        """The pod's HOME: a directory of its own, as an image's home is the container's, never the caller's."""
        home = self.root / "pods" / pod_name / "home"
        if not home.is_dir():
            home.mkdir(parents=True, mode=0o700)
            self.identity.hand_over(home)
        return home

    def pod(self, index: int) -> PodRun:
        suffix = secrets.token_hex(3)[:5]
        name = f"{self.plan.name}-{index}-{suffix}"
        template_meta = self.plan.pod_template.get("metadata", {})
        pod: dict[str, Any] = {
            "name": name,
            "uid": f"{self.plan.name}-{index}-{secrets.token_hex(8)}",
            "hostname": pod_hostname(self.plan.name, index),
            "labels": {**template_meta.get("labels", {}), INDEX_LABEL: str(index),
                       JOB_NAME_LABEL: self.plan.name, "job-name": self.plan.name,
                       JOB_UID_LABEL: self.job_uid, "controller-uid": self.job_uid},
            "annotations": {**template_meta.get("annotations", {}), INDEX_LABEL: str(index)},
        }
        spec = self.plan.pod_spec
        ports = self.pod_ports()
        init = [self.container_run(c, pod, ports) for c in spec.get("initContainers") or []]
        main = self.container_run(spec["containers"][0], pod, ports)
        limits = spec["containers"][0].get("resources", {}).get("limits", {})
        cpu = divide_round_up(parse_quantity(limits["cpu"]), Decimal(1)) if "cpu" in limits else len(machine_cores())
        named = {declared["name"]: ports[int(declared["containerPort"])]
                 for declared in spec["containers"][0].get("ports") or [] if declared.get("name")}
        return PodRun(name, pod["uid"], index, init, main, cpu, named)
