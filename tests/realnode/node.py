"""One real Kubernetes node on this machine for the realnode tier: the control plane of tests/controlplane (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler) started with what a kubelet needs, a containerd with
its own root and socket, a kubelet, a bridge network (CNI's bridge and host-local plugins) and a dnsmasq on the
bridge's gateway as cluster DNS, fed from the headless Services' EndpointSlices. Everything this machine needs
that a cloud node does not is in ../shared/k8s/README.md; each setting below that says so was a failure there.

Everything started is stopped by its PID in stop(), and everything changed is undone: pods, shims, mounts,
network namespaces, the bridge, the kernel settings the kubelet and the bridge change, the fixed paths the
kubelet writes. Only containerd's content store (the imported images) is kept between runs, under STATE.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from hashlib import sha256
from pathlib import Path

from tests.controlplane import cluster
from tests.controlplane.cluster import ControlPlane, free_port

STATE = Path(os.environ.get("REALNODE_STATE", "/var/tmp/indexed-trainer-realnode"))
NODE = "realnode"
BRIDGE, SUBNET, GATEWAY = "itrn0", "10.244.77.0/24", "10.244.77.1"
PAUSE_IMAGE = "localhost/indexed-trainer/pause:realnode"
SYSCTLS = ("net.ipv4.ip_forward", "vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops",
           "net.ipv4.conf.all.forwarding", "net.ipv6.conf.all.forwarding")
FIXED_PATHS = ("/run/containerd", "/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni",
               "/run/netns", "/var/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = (*cluster.CONTROLLERS, "node-lifecycle-controller", "persistentvolume-binder-controller",
               "persistentvolume-protection-controller", "persistentvolumeclaim-protection-controller",
               "endpointslice-controller", "pod-garbage-collector-controller")
DEBIAN = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "dnsmasq": "dnsmasq-base",
          "iptables": "iptables", "conntrack": "conntrack", "gcc": "gcc", "openssl": "openssl", "ip": "iproute2"}
CNI_PLUGINS = ("bridge", "host-local", "loopback")
IMPORT_TIMEOUT = 1800  # the worker image's 6.5 GB streamed into containerd's content store: minutes cold


def missing_packages() -> list[str]:
    """The Debian packages whose tools this node needs and this machine lacks."""
    absent = {package for tool, package in DEBIAN.items() if shutil.which(tool) is None}
    assets = os.environ.get("KUBE_ASSETS")
    if shutil.which("etcd") is None and not (assets and os.access(Path(assets) / "etcd", os.X_OK)):
        absent.add("etcd-server")
    if not all(os.access(f"/usr/lib/cni/{plugin}", os.X_OK) for plugin in CNI_PLUGINS):
        absent.add("containernetworking-plugins")
    if not Path("/usr/lib/x86_64-linux-gnu/libc.a").exists() and not Path("/usr/lib/aarch64-linux-gnu/libc.a").exists():
        absent.add("libc6-dev")
    return sorted(absent)


def run(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 120)
    result = subprocess.run(list(args), capture_output=True, text=True, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args[:4])} exited {result.returncode}: {result.stderr[-2000:]}")
    return result


def iptables_snapshot() -> dict[tuple[str, str], tuple[set[str], list[str]]]:
    """Each table's chains and rules, as iptables-save and ip6tables-save write them."""
    snapshot = {}
    for tool in ("iptables", "ip6tables"):
        saved = run(f"{tool}-save", check=False)
        table = None
        for line in saved.stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
                snapshot[(tool, table)] = (set(), [])
            elif line.startswith(":") and table:
                snapshot[(tool, table)][0].add(line[1:].split()[0])
            elif line.startswith("-A ") and table:
                snapshot[(tool, table)][1].append(line)
    return snapshot


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


class RealNode:
    def __init__(self, assets: Path, state: Path = STATE):
        self.assets, self.state = assets, state
        self.run_dir = state / "run"  # remade every start; containerd's root (the images) beside it is kept
        self.socket = self.run_dir / "containerd.sock"
        self.plane: ControlPlane | None = None
        self.processes: dict[str, subprocess.Popen] = {}
        self.sysctls: dict[str, str] = {}
        self.preexisting: set[str] = set()
        self.bridge_made = False
        self._stopping = threading.Event()
        self.netns: set[str] = set()
        self.iptables: dict = {}
        self.stop_times: list[tuple[str, float]] = []
        self._feeder: threading.Thread | None = None

    # -- life -----------------------------------------------------------------------------------------
    def start(self) -> RealNode:
        self._refuse_leftovers()
        self.sysctls = {name: sysctl_path(name).read_text().strip() for name in SYSCTLS if sysctl_path(name).exists()}
        self.preexisting = {path for path in FIXED_PATHS if os.path.lexists(path)}
        self.iptables = iptables_snapshot()
        self.netns = {str(p) for d in ("/run/netns", "/var/run/netns") if Path(d).is_dir() for p in Path(d).iterdir()}
        self.preexisting |= {f"cgroup:{c}" for c in self._cgroup_controllers() if (CGROUP_ROOT / c / "kubepods").exists()}
        shutil.rmtree(self.run_dir, ignore_errors=True)
        (self.run_dir / "logs").mkdir(parents=True)
        self._certificates()
        self._bridge()
        self._start_containerd()
        self._import_pause()
        self._start_control_plane()
        self._start_dns()
        self._start_kubelet()
        self._wait_node_ready()
        return self

    def stop(self) -> None:
        """Undo start(), every step tried whatever the one before did; the first error raised at the end."""
        errors = []
        for step in (self._delete_pods, self._stop_feeder, lambda: self._stop("kubelet"), self._remove_containers,
                     lambda: self._stop("containerd"), self._kill_shims, lambda: self._stop("dnsmasq"),
                     self._stop_plane, self._unmount, self._remove_network, self._restore, self._remove_cgroups,
                     self._restore_iptables):
            started = time.monotonic()
            try:
                step()
                self.stop_times.append((getattr(step, "__name__", "?"), time.monotonic() - started))
            except Exception as error:  # noqa: BLE001 - teardown goes on, the first error is raised below
                errors.append(error)
        if errors:
            raise errors[0]

    # -- use ------------------------------------------------------------------------------------------
    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return self.plane.kubectl(*args, stdin=stdin, check=check)

    def get(self, *args: str) -> dict:
        return self.plane.get(*args)

    def ctr(self, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        return run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args, check=check, **kwargs)

    def import_image(self, name: str, image_id: str, save: list[str], env: dict | None = None) -> bool:
        """Import `name` (whose config digest is `image_id`) into containerd from `save`'s docker-archive on
        stdout, unless containerd already holds it with that config; True when it imported.

        Once more if the unpack lost a parent layer's snapshot: the import retags `name`, which leaves the earlier
        image's snapshots to containerd's garbage collector, and one the unpack had found (a layer both images
        share) can be collected before the new top layer is prepared on it ("parent snapshot ... does not exist").
        The second unpack finds it gone and extracts it again from the content store."""
        if self._config_digest(name) == image_id:
            return False
        for attempt in (1, 2):
            with subprocess.Popen(save, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as saver:
                imported = run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", "images", "import",
                               "-", stdin=saver.stdout, timeout=IMPORT_TIMEOUT, check=False)
                saver.stdout.close()
                saver.wait(timeout=60)
            lost_parent = "parent snapshot" in imported.stderr and "does not exist" in imported.stderr
            if saver.returncode == 0 and imported.returncode != 0 and lost_parent and attempt == 1:
                continue
            break
        assert saver.returncode == 0 and imported.returncode == 0, f"{save[0]} save | ctr import: {imported.stderr}"
        assert self._config_digest(name) == image_id, f"containerd's {name} is not {image_id}"
        return True

    def _config_digest(self, name: str) -> str | None:
        listed = self.ctr("images", "ls").stdout.splitlines()[1:]
        targets = [line.split()[2] for line in listed if line.split()[0] == name]
        if not targets:
            return None
        manifest = json.loads(self.ctr("content", "get", targets[0]).stdout)
        return manifest["config"]["digest"].removeprefix("sha256:")

    # -- start's steps --------------------------------------------------------------------------------
    def _certificates(self) -> None:
        """A CA, the kubelet's client certificate (CN=system:node:NAME, O=system:nodes) and the API server's
        client certificate for the kubelet (logs, exec): the kubelet authenticates callers with the CA."""
        pki = self.run_dir / "pki"
        pki.mkdir()
        run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"), "-subj", "/CN=realnode-ca", "-days", "2")
        for name, subject in (("kubelet", f"/O=system:nodes/CN=system:node:{NODE}"),
                              ("apiserver-kubelet", "/O=system:masters/CN=kube-apiserver-kubelet-client")):
            run("openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", str(pki / f"{name}.key"), "-out", str(pki / f"{name}.csr"), "-subj", subject)
            run("openssl", "x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(pki / "ca.crt"),
                "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-out", str(pki / f"{name}.crt"), "-days", "2")

    def _refuse_leftovers(self) -> None:
        """An earlier run not torn down (its process killed): nothing is removed under it, it is said instead."""
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        left = [point for point in mounts if point.startswith(str(self.state))]
        if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            left.append(f"interface {BRIDGE}")
        if self._pids_naming(str(self.socket)):
            left.append(f"processes naming {self.socket}")
        if left:
            raise RuntimeError(f"an earlier realnode run was not torn down: {', '.join(left[:5])}")

    def _bridge(self) -> None:
        """The pods' bridge, made before the first pod so that dnsmasq and the kubelet can bind its gateway."""
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        self.bridge_made = True
        run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        net = self.run_dir / "cni"
        net.mkdir()
        (net / "10-realnode.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "realnode", "plugins": [{
                "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                         "dataDir": str(self.run_dir / "cni-ipam")}}]}))

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.run_dir / "logs" / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, cwd=self.run_dir,
                                                start_new_session=True)

    def _start_containerd(self) -> None:
        """cgroupfs (no systemd here) and restrict_oom_score_adj (root without CAP_SYS_RESOURCE cannot lower an
        oom_score_adj: every sandbox failed in runc without it)."""
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = self.run_dir / "containerd.toml"
        config.write_text(f"""version = 2
root = "{self.state / 'containerd'}"
state = "{self.run_dir / 'containerd'}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{self.run_dir / 'cni'}"
""")
        self._spawn("containerd", "containerd", "--config", str(config))
        self._wait(lambda: self.ctr("version", check=False).returncode == 0, "containerd", 60)

    def _import_pause(self) -> None:
        """The sandbox image: pause.c (beside this file) built static, in a one-layer docker-archive."""
        binary = self.run_dir / "pause"
        run("gcc", "-static", "-O2", "-o", str(binary), str(Path(__file__).with_name("pause.c")))
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            tar.add(binary, arcname="pause")
        layer_bytes = layer.getvalue()
        config = json.dumps({"architecture": "amd64" if os.uname().machine == "x86_64" else "arm64", "os": "linux",
                             "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
                             "rootfs": {"type": "layers", "diff_ids": [f"sha256:{sha256(layer_bytes).hexdigest()}"]}})
        manifest = json.dumps([{"Config": "config.json", "RepoTags": [PAUSE_IMAGE], "Layers": ["layer.tar"]}])
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for name, data in (("layer.tar", layer_bytes), ("config.json", config.encode()),
                               ("manifest.json", manifest.encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        imported = subprocess.run(["ctr", "--address", str(self.socket), "--namespace", "k8s.io", "images", "import",
                                   "-"], input=archive.getvalue(), capture_output=True, timeout=120)
        assert imported.returncode == 0, f"ctr import of the pause image: {imported.stderr.decode()[-2000:]}"

    def _start_control_plane(self) -> None:
        """tests/controlplane's ControlPlane with what a kubelet needs: client certificates accepted (the
        kubelet's), the API server's client certificate for the kubelet, the node authorizer, and the controllers a
        node and a volume need (node lifecycle lifts the not-ready taint)."""
        pki = self.run_dir / "pki"
        self.plane = ControlPlane(self.assets, self.run_dir / "control-plane")
        self.plane.start(nodes=0, authorization="Node,RBAC", controllers=CONTROLLERS, apiserver_args=(
            "--client-ca-file", str(pki / "ca.crt"),
            "--kubelet-client-certificate", str(pki / "apiserver-kubelet.crt"),
            "--kubelet-client-key", str(pki / "apiserver-kubelet.key"),
            "--kubelet-preferred-address-types", "InternalIP,Hostname"))

    @staticmethod
    def _kubeconfig(server: str, user: dict) -> str:
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}]})

    def _start_dns(self) -> None:
        """dnsmasq on the bridge's gateway, answering cluster.local from a hosts file the feeder writes from
        the headless Services' EndpointSlices (no CoreDNS here), refusing every other name (no upstream)."""
        self.hosts = self.run_dir / "cluster-hosts"
        self.hosts.write_text("")
        self._spawn("dnsmasq", "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
                    "--no-hosts", f"--addn-hosts={self.hosts}", f"--listen-address={GATEWAY}", "--bind-interfaces",
                    "--except-interface=lo", "--local=/cluster.local/", "--user=root", "--log-facility=-",
                    f"--pid-file={self.run_dir / 'dnsmasq.pid'}")
        self._feeder = threading.Thread(target=self._feed_dns, name="realnode-dns", daemon=True)
        self._feeder.start()

    def _feed_dns(self) -> None:
        written = ""
        while not self._stopping.wait(1):
            try:
                listed = self.kubectl("get", "endpointslices", "-A", "-o", "json", check=False)
                if listed.returncode != 0:
                    continue
                content = "".join(f"{line}\n" for line in sorted(set(self._host_lines(json.loads(listed.stdout)["items"]))))
                if content != written:
                    partial = self.hosts.with_suffix(".partial")
                    partial.write_text(content)
                    partial.replace(self.hosts)
                    self.processes["dnsmasq"].send_signal(signal.SIGHUP)  # dnsmasq rereads --addn-hosts
                    written = content
            except (OSError, ValueError, subprocess.SubprocessError) as error:  # the next second tries again
                print(f"realnode: cluster DNS feeder: {error}", file=sys.stderr, flush=True)

    @staticmethod
    def _host_lines(slices: list[dict]):
        """CoreDNS's records for a headless Service: <hostname>.<service>.<ns>.svc and <service>.<ns>.svc for
        every ready endpoint (the EndpointSlice controller marks not-ready pods ready under
        publishNotReadyAddresses, as the rendered Service asks)."""
        for item in slices:
            service = item["metadata"].get("labels", {}).get("kubernetes.io/service-name")
            domain = f"{service}.{item['metadata']['namespace']}.svc.cluster.local"
            for endpoint in item.get("endpoints") or []:
                if not service or not endpoint.get("conditions", {}).get("ready"):
                    continue
                for address in endpoint.get("addresses", []):
                    yield f"{address} {domain}"
                    if endpoint.get("hostname"):
                        yield f"{address} {endpoint['hostname']}.{domain}"

    def _start_kubelet(self) -> None:
        """The kubelet on cgroup v1 (failCgroupV1: false), cgroupfs, oomScoreAdj 0 (no CAP_SYS_RESOURCE), webhook
        authentication and the CA for the API server's calls, the dnsmasq as cluster DNS, no image GC."""
        pki, root = self.run_dir / "pki", self.run_dir / "kubelet"
        root.mkdir()
        kubeconfig = root / "kubeconfig"
        kubeconfig.write_text(self._kubeconfig(self.plane.server, {"client-certificate": str(pki / "kubelet.crt"),
                                                                   "client-key": str(pki / "kubelet.key")}))
        endpoint = f"unix://{self.socket}"
        config = root / "config.json"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "oomScoreAdj": 0, "failSwapOn": False,
            "address": GATEWAY, "port": free_port(), "readOnlyPort": 0, "healthzPort": 0,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [GATEWAY], "clusterDomain": "cluster.local",
            "containerRuntimeEndpoint": endpoint, "imageServiceEndpoint": endpoint,
            "podLogsDir": str(self.run_dir / "pod-logs"), "staticPodPath": "",
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "maxPods": 20, "syncFrequency": "5s", "nodeStatusUpdateFrequency": "5s"}))
        self._spawn("kubelet", str(self.assets / "kubelet"), "--config", str(config), "--kubeconfig", str(kubeconfig),
                    "--root-dir", str(root), "--cert-dir", str(root / "pki"), "--hostname-override", NODE,
                    "--node-ip", GATEWAY, "--v", "2")

    def _wait_node_ready(self) -> None:
        def ready() -> bool:
            listed = self.kubectl("get", "node", NODE, "-o", "json", check=False)
            if listed.returncode != 0:
                return False
            node = json.loads(listed.stdout)
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
            return conditions.get("Ready") == "True" and not node["spec"].get("taints")
        self._wait(ready, "node Ready and untainted", 180)

    def _wait(self, done, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited {process.returncode}; see {self.run_dir}/logs/{name}.log")
            if done():
                return
            time.sleep(0.5)
        raise TimeoutError(f"{what}: not in {timeout} s; see {self.run_dir}/logs/")

    # -- stop's steps ---------------------------------------------------------------------------------
    def _delete_pods(self) -> None:
        """Every pod deleted at once, then the kubelet given the time to stop them (CNI DEL, netns, mounts)."""
        if self.plane is None or "kubelet" not in self.processes or self.processes["kubelet"].poll() is not None:
            return
        self.kubectl("delete", "pods", "--all", "-A", "--grace-period=0", "--force", "--wait=false", check=False)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            listed = self.kubectl("get", "pods", "-A", "-o", "name", check=False)
            sandboxes = list((self.run_dir / "containerd" / "io.containerd.runtime.v2.task" / "k8s.io").glob("*"))
            if listed.returncode == 0 and not listed.stdout.strip() and not sandboxes:
                return
            time.sleep(1)

    def _stop_feeder(self) -> None:
        self._stopping.set()
        if self._feeder is not None:
            self._feeder.join(timeout=30)

    def _stop(self, name: str) -> None:
        process = self.processes.get(name)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _remove_containers(self) -> None:
        """What the kubelet left in containerd (stopped sandboxes and containers) removed, tasks killed first."""
        if self.processes.get("containerd") is None or self.processes["containerd"].poll() is not None:
            return
        for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
            self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
            self.ctr("tasks", "delete", "-f", task, check=False, timeout=60)
        for container in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", container, check=False)

    def _kill_shims(self) -> None:
        """Shims of this containerd (their command line names its socket) left running: killed by PID."""
        for pid in self._pids_naming(str(self.socket)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _pids_naming(self, text: str) -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if text.encode() in (entry / "cmdline").read_bytes():
                        found.append(int(entry.name))
                except OSError:
                    pass
        return found

    def _stop_plane(self) -> None:
        if self.plane is not None:
            self.plane.stop()

    def _unmount(self) -> None:
        """Mounts under STATE (pods' volumes, overlay snapshots) and network namespaces made while we ran."""
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for point in sorted({m for m in mounts if m.startswith(str(self.state))}, key=len, reverse=True):
            run("umount", "-l", point, check=False)
        for directory in ("/run/netns", "/var/run/netns"):
            for namespace in Path(directory).glob("cni-*") if Path(directory).is_dir() else []:
                if str(namespace) not in self.netns:
                    run("umount", "-l", str(namespace), check=False)
                    namespace.unlink(missing_ok=True)

    def _remove_network(self) -> None:
        if self.bridge_made:
            for link in json.loads(run("ip", "-j", "link", "show", "master", BRIDGE, check=False).stdout or "[]"):
                run("ip", "link", "del", link["ifname"], check=False)
            run("ip", "link", "del", BRIDGE, check=False)
            self.bridge_made = False

    def _restore(self) -> None:
        for name, value in self.sysctls.items():
            if sysctl_path(name).read_text().strip() != value:
                sysctl_path(name).write_text(value)
        for path in FIXED_PATHS:
            if path not in self.preexisting and os.path.lexists(path):
                if os.path.islink(path):
                    os.unlink(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)

    def _restore_iptables(self) -> None:
        """The kubelet's chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...) and rules added while we ran, removed."""
        if not self.iptables:
            return
        for (tool, table), (chains, rules) in iptables_snapshot().items():
            before_chains, before_rules = self.iptables.get((tool, table), (set(), []))
            for rule in rules:
                if rule not in before_rules:
                    run(tool, "-t", table, "-D", *shlex.split(rule)[1:], check=False)
            for chain in chains - before_chains:
                run(tool, "-t", table, "-F", chain, check=False)
                run(tool, "-t", table, "-X", chain, check=False)

    @staticmethod
    def _cgroup_controllers() -> list[str]:
        return [c.name for c in CGROUP_ROOT.iterdir() if c.is_dir() and not c.is_symlink()] if CGROUP_ROOT.is_dir() else []

    def _remove_cgroups(self) -> None:
        """The kubelet's kubepods hierarchy (cgroupfs), emptied by now: removed leaves first."""
        for controller in self._cgroup_controllers():
            top = CGROUP_ROOT / controller / "kubepods"
            if f"cgroup:{controller}" in self.preexisting or not top.is_dir():
                continue
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                                    reverse=True) + [top]:
                try:
                    directory.rmdir()
                except OSError:
                    pass
