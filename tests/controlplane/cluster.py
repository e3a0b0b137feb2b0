"""A real Kubernetes control plane on 127.0.0.1 for the controlplane tier, as controller-runtime's envtest runs
one: etcd, kube-apiserver, kube-controller-manager (the Job controller) and kube-scheduler from the directory
$KUBE_ASSETS names or from ../shared/k8s (tests/kube_binaries.py), and fake Nodes. There is no kubelet: a test
writes pods' status through the status subresource, as a kubelet would.

    KUBE_ASSETS=/path/to/bin .venv/bin/pytest -m controlplane

How to get the binaries without a registry: tests/controlplane/README.md.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from localjob.ports import free_port, free_ports
from tests.kube_binaries import CONTROL_PLANE, binaries

TOKEN = "indexed-trainer-test-token"
# What the tiers' scenarios need of kube-controller-manager: Jobs, their pods' garbage, namespaces' deletion.
CONTROLLERS = ("job-controller", "garbage-collector-controller", "namespace-controller")


def assets_dir() -> tuple[Path | None, str]:
    """The control plane's binaries' directory, or None and why not (tests/kube_binaries.py)."""
    return binaries(CONTROL_PLANE)


class ControlPlane:
    def __init__(self, assets: Path, workdir: Path):
        self.assets, self.workdir = assets, workdir
        self.processes: list[subprocess.Popen] = []
        self.kubeconfig = workdir / "kubeconfig"

    # -- life -----------------------------------------------------------------------------------------
    def start(self, nodes: int = 4, apiserver_args: tuple[str, ...] = (), authorization: str = "RBAC",
              controllers: tuple[str, ...] = CONTROLLERS, controller_args: tuple[str, ...] = ()) -> ControlPlane:
        """etcd, the API server (with ``apiserver_args``), the controllers named (with ``controller_args``) and the
        scheduler; ``nodes`` fake Nodes (a real node's kubelet registers its own: tests/realnode)."""
        work = self.workdir
        (work / "logs").mkdir(parents=True, exist_ok=True)
        subprocess.run(["openssl", "genrsa", "-out", str(work / "sa.key"), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(work / "sa.key"), "-pubout", "-out", str(work / "sa.pub")],
                       check=True, capture_output=True)
        (work / "tokens.csv").write_text(f"{TOKEN},admin,admin,system:masters\n")
        etcd_port, peer_port, api_port = free_ports(3)
        self._spawn("etcd", "--data-dir", str(work / "etcd"), "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                    "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                    "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                    "--initial-cluster", f"default=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync")
        self._spawn("kube-apiserver", "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
                    "--secure-port", str(api_port), "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                    "--cert-dir", str(work / "apiserver-certs"), "--token-auth-file", str(work / "tokens.csv"),
                    "--authorization-mode", authorization, *apiserver_args, "--service-cluster-ip-range", "10.96.0.0/24",
                    "--service-account-issuer", "https://kubernetes.default.svc",
                    "--service-account-key-file", str(work / "sa.pub"),
                    "--service-account-signing-key-file", str(work / "sa.key"),
                    "--disable-admission-plugins", "ServiceAccount")
        self.server = f"https://127.0.0.1:{api_port}"
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }))
        self._wait_ready()
        self._spawn("kube-controller-manager", "--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
                    "--controllers", ",".join(controllers), *controller_args,
                    "--secure-port", str(free_port()), "--bind-address", "127.0.0.1",
                    "--cert-dir", str(work / "kcm-certs"))
        self._spawn("kube-scheduler", "--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
                    "--secure-port", str(free_port()), "--bind-address", "127.0.0.1",
                    "--cert-dir", str(work / "scheduler-certs"))
        for number in range(nodes):
            self.add_node(f"node-{number}")
        return self

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.workdir / "logs" / f"{name}.log").open("wb")
        self.processes.append(subprocess.Popen([str(self.assets / name), *args], stdout=log, stderr=subprocess.STDOUT,
                                               cwd=self.workdir, start_new_session=True))

    def _wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args[0]} exited {process.returncode}; see {self.workdir}/logs/")
            if self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise TimeoutError(f"kube-apiserver not ready in {timeout} s; see {self.workdir}/logs/")

    def stop(self, grace: float = 5) -> None:
        """Each process by PID, the last started first: SIGTERM, then SIGKILL after ``grace`` seconds (the API
        server sits out more than 5 s of SIGTERM)."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    # -- use ------------------------------------------------------------------------------------------
    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr or result.stdout}")
        return result

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def add_node(self, name: str) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Node",
                                                          "metadata": {"name": name}}))
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now,
             "lastTransitionTime": now}]}}
        self.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
        # The API server's TaintNodesByCondition admission taints a new node not-ready; the node lifecycle
        # controller (not run here) lifts it once the kubelet reports Ready, as the status above says.
        self.kubectl("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-", check=False)

    def set_pod_status(self, namespace: str, pod: str, status: dict, may_be_gone: bool = False) -> None:
        """Write a pod's status as its kubelet would (the status subresource). With ``may_be_gone``, a pod
        deleted since it was listed is no error: one never bound to a node goes at once, once the Job controller
        has removed its tracking finalizer, and a kubelet's status then has nowhere to go (the controller counts
        the pod as it counts any deleted one)."""
        result = self.kubectl("-n", namespace, "patch", "pod", pod, "--subresource=status", "--type=merge",
                              "-p", json.dumps({"status": status}), check=False)
        if result.returncode != 0 and not (may_be_gone and "NotFound" in result.stderr):
            raise AssertionError(f"writing {namespace}/{pod}'s status: {result.stderr or result.stdout}")
