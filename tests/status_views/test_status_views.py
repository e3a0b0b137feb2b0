"""`./run.sh --status`: what a person reads about a Job on the cluster (kubectl's JSON in, lines out)."""

import json
import os
import subprocess
from datetime import datetime, timezone

import pytest

from status_views import slurm as slurm_status
from status_views.kubernetes import describe, latest_progress
from tests.conftest import BIN, ROOT

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=timezone.utc)
JOB = {
    "metadata": {"name": "mnist-train", "namespace": "ml"},
    "spec": {"completions": 2, "backoffLimit": 6},
    "status": {"active": 2, "failed": 1, "conditions": []},
}


def pod(name, index, created, phase, state, container="worker"):
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "status": {"phase": phase, "containerStatuses": [{"name": container, "state": state}]}}


PODS = [
    pod("mnist-train-1-bbbbb", 1, "2026-11-24T11:50:00Z", "Failed",
        {"terminated": {"exitCode": 78, "message": "exit 78: bad configuration: retrying cannot help, the Job fails; "
                                                   "worker rank 1 failed first with exit code 78"}}),
    pod("mnist-train-0-aaaaa", 0, "2026-11-24T11:50:00Z", "Running",
        {"running": {"startedAt": "2026-11-24T11:57:55Z"}}),
    pod("mnist-train-1-ccccc", 1, "2026-11-24T11:55:00Z", "Pending", {"waiting": {"reason": "ContainerCreating"}}),
]


def test_each_index_its_pods_exit_codes_meanings_and_progress():
    lines = describe(JOB, PODS, "Rank 0: epoch 2/5, test accuracy=0.9712, 2000 images/s, 20 s elapsed", NOW)
    assert lines == [
        "Job ml/mnist-train: Running; 2 active, 0 succeeded, 1 failed (backoffLimit 6)",
        "index 0: mnist-train-0-aaaaa Running for 2 min 05 s",
        "index 1: mnist-train-1-bbbbb Failed, exit 78 (bad configuration: retrying cannot help, the Job fails): exit "
        "78: bad configuration: retrying cannot help, the Job fails; worker rank 1 failed first with exit code 78",
        "         mnist-train-1-ccccc Pending (ContainerCreating)",
        "index 0's latest progress: Rank 0: epoch 2/5, test accuracy=0.9712, 2000 images/s, 20 s elapsed",
        "last error: mnist-train-1-bbbbb exit 78 (bad configuration: retrying cannot help, the Job fails): exit 78: "
        "bad configuration: retrying cannot help, the Job fails; worker rank 1 failed first with exit code 78",
    ]


def test_a_pod_failed_in_an_init_container_shows_that_containers_exit_and_message():
    """check-config refused the values: the worker never ran (its state says PodInitializing); the line and the last
    error are check-config's, as a real kubelet reports them."""
    failed = pod("mnist-train-0-ddddd", 0, "2026-11-24T11:59:00Z", "Failed", {"waiting": {"reason": "PodInitializing"}})
    failed["status"]["initContainerStatuses"] = [{"name": "check-config", "state": {"terminated": {
        "exitCode": 78, "message": "Rank 0: configuration error: EPOCHS: 'abc' must be a whole number\n"
                                    "Rank 0: exiting with code 78 (bad configuration); see `python -m worker --help`\n"}}}]
    lines = describe({**JOB, "spec": {"completions": 1}}, [failed], None, NOW)
    meaning = "bad configuration: retrying cannot help, the Job fails"
    # the message's closing line only repeats the code: the line before it says why
    assert lines[1] == f"index 0: mnist-train-0-ddddd Failed, exit 78 in check-config ({meaning}): Rank 0: " \
                       "configuration error: EPOCHS: 'abc' must be a whole number"
    assert lines[-1] == f"last error: mnist-train-0-ddddd exit 78 in check-config ({meaning}): Rank 0: configuration " \
                        "error: EPOCHS: 'abc' must be a whole number"


def test_a_finished_job_shows_its_conditions():
    job = {**JOB, "status": {"succeeded": 2, "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached"},
        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached"}]}}
    lines = describe(job, [], None, NOW)
    assert lines[0] == "Job ml/mnist-train: Complete; 0 active, 2 succeeded, 0 failed (backoffLimit 6)"
    assert lines[1:] == ["  SuccessCriteriaMet: CompletionsReached: Reached", "  Complete: CompletionsReached: Reached",
                         "index 0: no pod", "index 1: no pod"]


def test_a_failed_jobs_index_without_a_pod_says_the_controller_deleted_it():
    """A Job that fails deletes its running pods (the Job controller's cleanup): the index says so, not a bare gap."""
    job = {**JOB, "status": {"failed": 2, "conditions": [
        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "exit code 78"}]}}
    lines = describe(job, [], None, NOW)
    assert lines[2:4] == ["index 0: no pod left (a failed Job's running pods are deleted)",
                          "index 1: no pod left (a failed Job's running pods are deleted)"]


def test_a_job_that_met_its_success_policy_says_its_lingering_pod_was_deleted():
    """Index 0's success completes the Job (the rendered successPolicy); index 1's pod, still ending, is deleted."""
    job = {**JOB, "status": {"succeeded": 1, "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy", "message": "Matched rules"},
        {"type": "Complete", "status": "True", "reason": "SuccessPolicy", "message": "Matched rules"}]}}
    lines = describe(job, [], None, NOW)
    assert lines[3:5] == ["index 0: no pod left (a Job that met its successPolicy has its running pods deleted)",
                          "index 1: no pod left (a Job that met its successPolicy has its running pods deleted)"]


def test_the_latest_progress_is_rank_0s_epoch_line_else_the_last_line():
    log = "launcher: ...\nRank 0: epoch: 2/5, batch: 10/63, mini-batch size: 32\nRank 1: epoch: 2/5\n"
    assert latest_progress(log) == "Rank 0: epoch: 2/5, batch: 10/63, mini-batch size: 32"
    assert latest_progress("step 10 loss 0.3\nstep 20 loss 0.2\n") == "step 20 loss 0.2"
    assert latest_progress("") is None


GROUPS_JOB = {
    "metadata": {"name": "mnist-groups", "namespace": "ml"},
    "spec": {"completions": 3, "backoffLimit": 9, "maxFailedIndexes": 1, "template": {"spec": {"containers": [
        {"name": "worker", "env": [{"name": "REPLICA_GROUP", "value": "$(JOB_COMPLETION_INDEX)"}]}]}}},
    "status": {"active": 2, "failed": 1, "conditions": []},
}
RUNNING = {"running": {"startedAt": "2026-11-24T11:57:55Z"}}


@pytest.mark.parametrize("pods, status, reporter, line", [
    # every group runs: index 0 reports, as the gang's
    ([(0, "Running", RUNNING), (1, "Running", RUNNING), (2, "Running", RUNNING)], {}, 0,
     "replica groups: 3 of 3 running"),
    # index 0's pod was deleted and its replacement starts: index 1 reports the job's steps meanwhile
    ([(0, "Failed", {"terminated": {"exitCode": 82}}), (0, "Pending", {"waiting": {"reason": "ContainerCreating"}}),
      (1, "Running", RUNNING), (2, "Running", RUNNING)], {}, 1, "replica groups: 2 of 3 running (indexes 1, 2)"),
    # a group's crash loop failed its index: the others step on without it
    ([(0, "Running", RUNNING), (1, "Running", RUNNING), (2, "Failed", {"terminated": {"exitCode": 80}})],
     {"failedIndexes": "2"}, 0,
     "replica groups: 2 of 3 running (indexes 0, 1); failed indexes 2 (at most 1 may fail: the others step without "
     "them)"),
    # the job completed with group 1's success; the others were ended by the successPolicy
    ([(0, "Failed", {"terminated": {"exitCode": 143}}), (1, "Succeeded", {"terminated": {"exitCode": 0}})],
     {"completedIndexes": "1"}, 0,
     "replica groups: 0 of 3 running; succeeded: index 1 (the Job completes with its first group)"),
])
def test_a_job_of_replica_groups_says_its_groups_and_reports_its_first_running_group(pods, status, reporter, line):
    from status_views.kubernetes import has_replica_groups, reporting_index

    objects = [pod(f"mnist-groups-{index}-{number:05d}", index, f"2026-11-24T11:5{number}:00Z", phase, state)
               for number, (index, phase, state) in enumerate(pods)]
    job = {**GROUPS_JOB, "status": {**GROUPS_JOB["status"], **status}}
    assert has_replica_groups(job) and not has_replica_groups(JOB)
    assert reporting_index(objects, True) == reporter and reporting_index(objects, False) == 0
    lines = describe(job, objects, "Rank 0: step 40/192 (epoch 1), loss=0.3, 2 of 3 groups stepping", NOW,
                     live="step 40/192, 2 replica groups stepping", reporter=reporter, groups=True)
    assert line in lines, lines
    assert f"index {reporter}'s latest progress: Rank 0: step 40/192 (epoch 1), loss=0.3, 2 of 3 groups stepping" \
        in lines and f"index {reporter}'s live metrics: step 40/192, 2 replica groups stepping" in lines
    assert not [text for text in describe(JOB, PODS, None, NOW) if text.startswith("replica groups")]


def test_a_replica_groups_progress_is_its_step_line():
    log = "Rank 0: torchft: a peer failed\nRank 0: step 12/96 (epoch 1), loss=0.41, 2 of 2 groups stepping\n" \
          "Rank 0: torchft: quorum\n"
    assert latest_progress(log) == "Rank 0: step 12/96 (epoch 1), loss=0.41, 2 of 2 groups stepping"


def test_run_sh_status_asks_kubectl_and_prints_the_lines(tmp_path):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (tmp_path / "job.json").write_text(json.dumps(JOB))
    (tmp_path / "pods.json").write_text(json.dumps({"items": PODS}))
    (bin_dir / "kubectl").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{tmp_path}/calls"\n'
        f'case "$*" in *"get job"*) cat "{tmp_path}/job.json" ;; *"get pods"*) cat "{tmp_path}/pods.json" ;;\n'
        '  *logs*--limit-bytes*) printf "launcher: warning: this pod asked for 8 GPUs (resources.gpu.accelerator_count) '
        'but sees none: training on the CPU\\nRank 0: epoch: 1/5\\n" ;;\n'
        '  *logs*) printf "Rank 0: epoch: 1/5, batch: 20/63, mini-batch size: 32\\n" ;; esac\n')
    (bin_dir / "kubectl").chmod(0o755)
    env = {**os.environ, "BUILD_DIR": str(tmp_path / "build"), "PATH": f"{bin_dir}:{BIN}:{os.environ['PATH']}"}
    subprocess.run([str(ROOT / "prepare.sh"), "--set", "namespace=ml"], env=env, cwd=ROOT, check=True,
                   capture_output=True)
    result = subprocess.run([str(ROOT / "run.sh"), "--status"], env=env, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "index 1: mnist-train-1-bbbbb Failed, exit 78 (bad configuration" in result.stdout
    # the launcher's warning, from the head of index 0's log: said before the rendezvous
    assert ("warning: this pod asked for 8 GPUs (resources.gpu.accelerator_count) but sees none: training on the CPU"
            in result.stdout.splitlines())
    assert "index 0's latest progress: Rank 0: epoch: 1/5, batch: 20/63, mini-batch size: 32" in result.stdout
    assert "index 0's latest progress: Rank 0: epoch: 1/5, batch: 20/63" in result.stdout
    calls = (tmp_path / "calls").read_text()
    assert "-n ml get job mnist-train -o json" in calls
    assert "-n ml get pods -l batch.kubernetes.io/job-name=mnist-train -o json" in calls
    assert "-n ml logs mnist-train-0-aaaaa -c worker --tail=200" in calls


def test_run_sh_status_reads_index_0s_live_metrics_through_the_pod_proxy(tmp_path):
    """With a container port named metrics, index 0's live metrics come through the API server's pod proxy
    (kubectl get --raw .../pods/NAME:PORT/proxy/metrics); here the fake kubectl forwards that path to a real
    prometheus_client endpoint, as the API server forwards it to the pod."""
    import socket

    from trainer_runtime.metrics import Live

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    live = Live(port, lambda message: None)
    try:
        live.started(40)
        live.progress(50, steps=200, epoch=1, epochs=4)
        live.loss(0.25)
        live.evaluation("accuracy", 0.9)
        running = {**PODS[1], "spec": {"containers": [{"name": "worker", "ports": [
            {"name": "rendezvous", "containerPort": 29500}, {"name": "metrics", "containerPort": 9400}]}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "worker", "state": {"running": {}}}]}}
        bin_dir = tmp_path / "fakebin"
        bin_dir.mkdir()
        (tmp_path / "job.json").write_text(json.dumps(JOB))
        (tmp_path / "pods.json").write_text(json.dumps({"items": [running]}))
        (bin_dir / "kubectl").write_text(
            "#!/bin/sh\n"
            f'echo "$*" >> "{tmp_path}/calls"\n'
            f'case "$*" in *"get job"*) cat "{tmp_path}/job.json" ;; *"get pods"*) cat "{tmp_path}/pods.json" ;;\n'
            f'  *"--raw /api/v1/namespaces/ml/pods/mnist-train-0-aaaaa:9400/proxy/metrics"*) '
            f'"{BIN / "python"}" -c "import urllib.request; print(urllib.request.urlopen('
            f"'http://127.0.0.1:{port}/metrics').read().decode())\" ;;\n"
            '  *logs*) printf "Rank 0: epoch: 1/4, batch: 10/50, mini-batch size: 32\\n" ;; esac\n')
        (bin_dir / "kubectl").chmod(0o755)
        env = {**os.environ, "BUILD_DIR": str(tmp_path / "build"), "PATH": f"{bin_dir}:{BIN}:{os.environ['PATH']}"}
        subprocess.run([str(ROOT / "prepare.sh"), "--set", "namespace=ml"], env=env, cwd=ROOT, check=True,
                       capture_output=True)
        result = subprocess.run([str(ROOT / "run.sh"), "--status"], env=env, cwd=ROOT, capture_output=True,
                                text=True)
        assert result.returncode == 0, result.stderr
        assert "index 0's live metrics: step 50/200 (epoch 1/4), loss 0.2500, accuracy 0.9, " in result.stdout
    finally:
        live.close()


# --- what a Job or a Pending pod waits for (status_views/waiting.py), with the values key to change

def pending_pod(name="mnist-train-0-abcde", index=0, condition=None, init=None, container=None, **spec):
    """A Pending pod of the rendered Job as the API server returns it: 8 GPUs, 8 CPUs, 64Gi, the GPU model's node
    selector, a check-config init container."""
    worker = {"name": "worker", "image": "registry.example.com/ml/worker:0.1.0",
              "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                            "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}}}
    status = {"phase": "Pending", "conditions": [condition] if condition else [], "qosClass": "Guaranteed"}
    if init:
        status["initContainerStatuses"] = [{"name": "check-config", "ready": False, "restartCount": 0,
                                            "state": {"waiting": init}}]
        status["containerStatuses"] = [{"name": "worker", "ready": False, "restartCount": 0,
                                        "state": {"waiting": {"reason": "PodInitializing"}}}]
    if container:
        status["containerStatuses"] = [{"name": "worker", "ready": False, "restartCount": 0,
                                        "state": {"waiting": container}}]
    return {"metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-11-24T11:55:00Z",
                         "labels": {"batch.kubernetes.io/job-completion-index": str(index),
                                    "batch.kubernetes.io/job-name": "mnist-train"}},
            "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                     "imagePullSecrets": [{"name": "regcred"}],
                     "containers": [worker], **spec},
            "status": status}


def unschedulable_condition(message):
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastTransitionTime": "2026-11-24T11:55:01Z", "lastProbeTime": None}


def warning_event(pod, reason, message, at="2026-11-24T11:56:00Z"):
    return {"metadata": {"name": f"{pod}.18a1", "namespace": "ml", "creationTimestamp": at},
            "involvedObject": {"kind": "Pod", "namespace": "ml", "name": pod}, "reason": reason,
            "message": message, "type": "Warning", "eventTime": at, "lastTimestamp": None}


POD_0 = "waiting: index 0 pod mnist-train-0-abcde Pending: "
PENDING_JOB = {**JOB, "spec": {"completions": 1, "backoffLimit": 6}, "status": {"active": 1}}

WAITING = {
    "too many GPUs": (
        pending_pod(condition=unschedulable_condition(
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
            "3 No preemption victims found for incoming pod.")), [],
        POD_0 + "unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu: lower "
        "resources.gpu.accelerator_count (8) or add nodes with that many free GPUs (nvidia.com/gpu)"),
    "too many GPUs, with what Kubernetes 1.34+ adds after the reasons (dynamic resources' PostFilter)": (
        pending_pod(condition=unschedulable_condition(
            "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: 0/4 "
            "nodes are available: 4 No preemption victims found for incoming pod.")), [],
        POD_0 + "unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu: lower "
        "resources.gpu.accelerator_count (8) or add nodes with that many free GPUs (nvidia.com/gpu)"),
    "too many CPUs and too much memory": (
        pending_pod(condition=unschedulable_condition(
            "0/4 nodes are available: 2 Insufficient cpu, 4 Insufficient memory. preemption: 0/4 nodes are "
            "available: 4 No preemption victims found for incoming pod.")), [],
        POD_0 + "unschedulable: 0/4 nodes are available: 2 Insufficient cpu, 4 Insufficient memory: lower "
        "resources.cpu (8 per pod) or free CPUs on the nodes; lower resources.memory (64Gi per pod) or free "
        "memory on the nodes"),
    "an untolerated taint and no node with the labels": (
        pending_pod(condition=unschedulable_condition(
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
            "2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: "
            "3 Preemption is not helpful for scheduling.")), [],
        POD_0 + "unschedulable: 0/3 nodes are available: 1 node(s) had untolerated taint "
        "{node-role.kubernetes.io/control-plane: }, 2 node(s) didn't match Pod's node affinity/selector: add a "
        "toleration for that taint to tolerations; no node has the labels of node_selector and "
        "resources.gpu.accelerator (nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3): change them, or label nodes so"),
    "an unbound claim": (
        pending_pod(condition=unschedulable_condition(
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are "
            "available: 3 Preemption is not helpful for scheduling.")), [],
        POD_0 + "unschedulable: 0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims: the "
        "shared volume's claim is not bound: set shared_volume.storage_class (several pods need a ReadWriteMany "
        "class) or shared_volume.existing_claim"),
    "only the scheduler's FailedScheduling event says why": (
        pending_pod(condition={"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}),
        [warning_event("mnist-train-0-abcde", "FailedScheduling", "0/2 nodes are available: 2 Insufficient cpu. "
                       "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.")],
        POD_0 + "unschedulable: 0/2 nodes are available: 2 Insufficient cpu: lower resources.cpu (8 per pod) or "
        "free CPUs on the nodes"),
    "the image cannot be pulled (the init container's, first)": (
        pending_pod(condition={"type": "PodScheduled", "status": "True"}, init={
            "reason": "ErrImagePull", "message": 'failed to pull and unpack image "registry.example.com/ml/worker:'
            '0.1.0": failed to resolve reference: pull access denied'}), [],
        POD_0 + "container check-config ErrImagePull: the image cannot be pulled: failed to pull and unpack image "
        '"registry.example.com/ml/worker:0.1.0": failed to resolve reference: pull access denied: check image '
        "(registry.example.com/ml/worker:0.1.0) and, for a private registry, image_pull_secrets (regcred)"),
    "pull back-off": (
        pending_pod(container={"reason": "ImagePullBackOff",
                               "message": 'Back-off pulling image "registry.example.com/ml/worker:0.1.0"'}), [],
        POD_0 + "container worker ImagePullBackOff: the image cannot be pulled: Back-off pulling image "
        '"registry.example.com/ml/worker:0.1.0": check image (registry.example.com/ml/worker:0.1.0) and, for a '
        "private registry, image_pull_secrets (regcred)"),
    "an invalid image name": (
        pending_pod(container={"reason": "InvalidImageName",
                               "message": 'Failed to apply default image tag "Registry/Worker": couldn\'t parse '
                                          'image name "Registry/Worker": invalid reference format'}), [],
        POD_0 + "container worker InvalidImageName: the image name is invalid: Failed to apply default image tag "
        '"Registry/Worker": couldn\'t parse image name "Registry/Worker": invalid reference format: fix image '
        "(registry.example.com/ml/worker:0.1.0)"),
    "a Secret's key is missing": (
        pending_pod(container={"reason": "CreateContainerConfigError",
                               "message": "couldn't find key token in Secret ml/hf-token"}), [],
        POD_0 + "container worker CreateContainerConfigError: a Secret (or its key) the pod names is missing: "
        "couldn't find key token in Secret ml/hf-token: create it, or fix env_from_secrets, env (secretKeyRef) or "
        "the *_secret keys (initializer.*.storage_uri_secret, checkpoint.signing_secret)"),
    "the image runs as root": (
        pending_pod(container={"reason": "CreateContainerConfigError",
                               "message": "container has runAsNonRoot and image will run as root (pod: "
                                          "\"mnist-train-0-abcde_ml(1f2e)\", container: worker)"}), [],
        POD_0 + "container worker CreateContainerConfigError: the image's user breaks the pod's non-root rule: "
        "container has runAsNonRoot and image will run as root (pod: \"mnist-train-0-abcde_ml(1f2e)\", container: "
        "worker): set security.run_as_user to the image's uid"),
    "a volume cannot be mounted": (
        pending_pod(condition={"type": "PodScheduled", "status": "True"},
                    container={"reason": "ContainerCreating"}),
        [warning_event("mnist-train-0-abcde", "FailedMount",
                       'MountVolume.SetUp failed for volume "tokenizer" : secret "tokenizer" not found'),
         warning_event("other-pod", "FailedScheduling", "0/3 nodes are available: 3 Insufficient cpu.")],
        POD_0 + "FailedMount: a volume cannot be mounted: MountVolume.SetUp failed for volume \"tokenizer\" : "
        "secret \"tokenizer\" not found: check shared_volume (the claim) and extra_volumes (each Secret, "
        "ConfigMap and claim must exist)"),
}


@pytest.mark.parametrize("case", sorted(WAITING))
def test_a_pending_pod_says_what_it_waits_for_and_the_key_to_change(case):
    pod, events, expected = WAITING[case]
    lines = describe(PENDING_JOB, [pod], None, NOW, events=events)
    assert [line for line in lines if line.startswith("waiting: ")] == [expected]


def test_a_pod_that_is_only_starting_waits_for_nothing():
    starting = pending_pod(condition={"type": "PodScheduled", "status": "True"},
                           container={"reason": "ContainerCreating"})
    lines = describe(PENDING_JOB, [starting], None, NOW,
                     events=[warning_event("mnist-train-1-other", "FailedMount", "timed out")])
    assert lines == ["Job ml/mnist-train: Running; 1 active, 0 succeeded, 0 failed (backoffLimit 6)",
                     "index 0: mnist-train-0-abcde Pending (ContainerCreating)"]


def test_pods_waiting_for_the_same_reason_share_one_line():
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pods = [pending_pod(f"mnist-train-{i}-abcd{i}", i, unschedulable_condition(message)) for i in (2, 0, 1)]
    job = {**PENDING_JOB, "spec": {"completions": 3}}
    waiting = [line for line in describe(job, pods, None, NOW) if line.startswith("waiting: ")]
    assert waiting == ["waiting: index 0 pod mnist-train-0-abcd0 Pending (and 2 more pods): unschedulable: 0/3 nodes "
                       "are available: 3 Insufficient nvidia.com/gpu: lower resources.gpu.accelerator_count (8) or "
                       "add nodes with that many free GPUs (nvidia.com/gpu)"]


KUEUE_JOB = {"metadata": {"name": "mnist-train", "namespace": "ml", "uid": "9d1c",
                          "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
             "spec": {"completions": 2, "backoffLimit": 3, "suspend": True},
             "status": {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended",
                                        "message": "Job suspended"}]}}


@pytest.mark.parametrize("job, kueue, expected", [
    (KUEUE_JOB, "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
                "default-flavor, request > maximum capacity (16 > 8)",
     "waiting: Job ml/mnist-train: Kueue has not admitted it in LocalQueue team-a yet (the whole gang's quota at "
     "once): couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
     "default-flavor, request > maximum capacity (16 > 8): wait, or change queue_name, or lower replicas and "
     "resources to fit the queue's quota (kubectl -n ml get workloads says why)"),
    ({**KUEUE_JOB, "metadata": {"name": "mnist-train", "namespace": "ml"}}, "",
     "waiting: Job ml/mnist-train: suspended (spec.suspend: true) by someone else, not by these values: resume it: "
     "kubectl -n ml patch job mnist-train --type=merge -p '{\"spec\":{\"suspend\":false}}'"),
])
def test_a_suspended_job_says_who_holds_it(job, kueue, expected):
    lines = describe(job, [], None, NOW, kueue=kueue)
    assert lines[0].startswith("Job ml/mnist-train: Suspended;")
    assert [line for line in lines if line.startswith("waiting: ")] == [expected]


def test_a_finished_suspended_job_waits_for_nothing():
    job = {**KUEUE_JOB, "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                                   "message": "Job was active longer than specified deadline"}]}}
    assert not [line for line in describe(job, [], None, NOW) if line.startswith("waiting: ")]


# --- Slurm: squeue's pending reason (status_views/slurm.py), the same style

SCONTROL = ("JobId=812 JobName=mnist-train UserId=ana(1000) GroupId=ana(1000) MCS_label=N/A Priority=4294901757 "
            "Nice=0 Account=ml QOS=normal JobState=PENDING Reason=Resources Dependency=(null) Requeue=1 Restarts=0 "
            "BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=1-00:00:00 TimeMin=N/A "
            "SubmitTime=2026-11-24T11:50:00 Partition=gpu AllocNode:Sid=login1:4242 ReqNodeList=(null) "
            "ExcNodeList=(null) NodeList= NumNodes=2-2 NumCPUs=16 NumTasks=2 CPUs/Task=8 ReqB:S:C:T=0:0:*:* "
            "TRES=cpu=16,mem=128G,node=2,billing=16,gres/gpu=8 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* "
            "MinCPUsNode=8 MinMemoryNode=64G MinTmpDiskNode=0 Features=a100 DelayBoot=00:00:00 OverSubscribe=OK "
            "Contiguous=0 Licenses=(null) Network=(null) Command=/scratch/ana/build/job.sbatch "
            "WorkDir=/scratch/ana StdErr=/scratch/ana/logs/mnist-train-812.err StdIn=/dev/null "
            "StdOut=/scratch/ana/logs/mnist-train-812.out Power= TresPerNode=gres:gpu:4")
PARTITION = "PartitionName=gpu MaxNodes=1 MaxTime=12:00:00 MinNodes=1 State=UP TotalNodes=4"
SLURM_0 = "waiting: Slurm job 812 mnist-train PENDING "
SLURM_WAITING = {
    "Resources": SLURM_0 + "(Resources): the nodes it asks for are in use by other jobs: it starts when they are "
    "free, sooner with less: replicas (2 nodes), resources.cpu (8 CPUs per node), resources.memory (64G per node), "
    "resources.gpu.accelerator_count (4 GPUs per node)",
    "Priority": SLURM_0 + "(Priority): jobs of higher priority are ahead of it in partition gpu; it starts after "
    "them: nothing to change (slurm.qos or slurm.partition, where the site offers a faster one)",
    "PartitionTimeLimit": SLURM_0 + "(PartitionTimeLimit): its time limit (1-00:00:00) is longer than partition "
    "gpu allows (MaxTime 12:00:00): lower slurm.time_limit, or choose another slurm.partition",
    "PartitionNodeLimit": SLURM_0 + "(PartitionNodeLimit): its 2 nodes are outside partition gpu's limits "
    "(MinNodes 1, MaxNodes 1), or some of its nodes are down or drained: change replicas (2), or choose another "
    "slurm.partition",
    "ReqNodeNotAvail,_UnavailableNodes:gpu[03-04]": SLURM_0 + "(ReqNodeNotAvail, UnavailableNodes:gpu[03-04]): "
    "nodes it needs are not available (down, drained, reserved or in use): wait, ask the administrators, or choose "
    "another slurm.partition (gpu)",
    "BadConstraints": SLURM_0 + "(BadConstraints): no node can satisfy what it asks for: check "
    "resources.gpu.accelerator and slurm.extra_options' --constraint (features: a100), "
    "resources.gpu.accelerator_count (4), resources.cpu (8) and resources.memory (64G)",
    "QOSMaxCpuPerUserLimit": SLURM_0 + "(QOSMaxCpuPerUserLimit): your user's running jobs together hold all the "
    "CPUs QOS normal allows each user: it starts when some of them end, sooner with less: resources.cpu (8 per "
    "node) or replicas (2)",
    "AssocGrpCpuLimit": SLURM_0 + "(AssocGrpCpuLimit): the running jobs of account ml together hold all the CPUs "
    "it allows: it starts when some of them end, sooner with less: resources.cpu (8 per node) or replicas (2); or "
    "use another slurm.account",
    "AssocGrpGRES": SLURM_0 + "(AssocGrpGRES): the running jobs of account ml together hold all the GPUs (generic "
    "resources) it allows: it starts when some of them end, sooner with less: resources.gpu.accelerator_count (4 "
    "per node) or replicas (2); or use another slurm.account",
    "QOSMaxWallDurationPerJobLimit": SLURM_0 + "(QOSMaxWallDurationPerJobLimit): it asks for more run time than QOS "
    "normal allows a job, so it cannot start as it is: lower slurm.time_limit (1-00:00:00), or use another "
    "slurm.qos",
    "QOSMaxNodePerJobLimit": SLURM_0 + "(QOSMaxNodePerJobLimit): it asks for more nodes than QOS normal allows a "
    "job, so it cannot start as it is: lower replicas (2), or use another slurm.qos",
    "AssocMaxMemPerJob": SLURM_0 + "(AssocMaxMemPerJob): it asks for more memory than account ml allows a job, so "
    "it cannot start as it is: lower resources.memory (64G per node) or replicas (2), or use another slurm.account",
    "InvalidQOS": SLURM_0 + "(InvalidQOS): QOS normal is not valid here: set slurm.qos to one of yours (sacctmgr "
    "show associations user=$USER)",
    "JobHeldUser": SLURM_0 + "(JobHeldUser): held by its user: release it: scontrol release 812",
    "BeginTime": SLURM_0 + "(BeginTime): its start time is not reached yet (a requeued job waits a moment before "
    "it restarts)",
    "QOSJobLimit": SLURM_0 + "(QOSJobLimit): a limit of its account or QOS is reached: wait, or use another "
    "slurm.account or slurm.qos",
    "SomethingNew": SLURM_0 + "(SomethingNew): see JOB REASON CODES in man squeue",
}


@pytest.mark.parametrize("reason", sorted(SLURM_WAITING))
def test_a_pending_slurm_job_says_squeues_reason_and_the_key_to_change(reason):
    job = {**slurm_status.parse_fields(SCONTROL), "Reason": reason}
    partition = slurm_status.parse_fields(PARTITION) if reason.startswith("Partition") else None
    assert slurm_status.describe(job, partition) == [
        f"Slurm job 812 mnist-train: PENDING ({reason.replace(',_', ', ')})", SLURM_WAITING[reason]]


@pytest.mark.parametrize("fields, line, code", [
    ("JobState=RUNNING RunTime=00:03:07 NodeList=gpu[01-02] NumNodes=2",
     "Slurm job 812 mnist-train: RUNNING for 00:03:07 on 2 nodes (gpu[01-02]), restarts 0", None),
    ("JobState=COMPLETED ExitCode=0:0 RunTime=00:41:10 NumNodes=2",
     "Slurm job 812 mnist-train: COMPLETED, exit 0 after 00:41:10 (restarts 0)", 0),
    ("JobState=FAILED ExitCode=78:0 RunTime=00:00:09 NumNodes=2",
     "Slurm job 812 mnist-train: FAILED, exit 78 (bad configuration: retrying cannot help, the Job fails) after "
     "00:00:09 (restarts 0)", 78),
    # a signal ended it: sbatch --wait returns 1; a pending job cancelled: 0:0, so 0, as sbatch --wait
    ("JobState=CANCELLED ExitCode=0:15 RunTime=00:10:00 NumNodes=2",
     "Slurm job 812 mnist-train: CANCELLED, signal 15 after 00:10:00 (restarts 0)", 1),
    ("JobState=CANCELLED ExitCode=0:0 RunTime=00:00:00 NumNodes=2-2",
     "Slurm job 812 mnist-train: CANCELLED, exit 0 after 00:00:00 (restarts 0)", 0),
])
def test_a_slurm_job_that_runs_or_ended_says_so_with_the_exit_code_sbatch_wait_returns(fields, line, code):
    job = {**slurm_status.parse_fields(SCONTROL), **slurm_status.parse_fields(fields)}
    assert slurm_status.describe(job) == [line]
    assert (slurm_status.exit_code(job) if job["JobState"] in slurm_status.FINISHED else None) == code


def test_waiting_on_slurm_says_each_change_once_and_returns_the_jobs_exit_code():
    base = slurm_status.parse_fields(SCONTROL)
    states = iter([{**base, "Reason": "None"}, {**base, "Reason": "Resources"}, {**base, "Reason": "Resources"},
                   slurm_status.SlurmError("slurm_load_jobs error: Socket timed out on send/recv operation"),
                   {**base, "JobState": "RUNNING", "NodeList": "gpu[01-02]", "RunTime": "00:00:01"},
                   {**base, "JobState": "RUNNING", "NodeList": "gpu[01-02]", "RunTime": "00:00:06"},
                   {**base, "JobState": "FAILED", "ExitCode": "78:0", "RunTime": "00:00:09"}])

    def reader(job_id):
        assert job_id == "812"
        state = next(states)
        if isinstance(state, Exception):
            raise state
        return state, None

    said: list[str] = []
    assert slurm_status.wait("812", 0, said.append, reader) == 78
    assert said == [
        "Slurm job 812 mnist-train: PENDING (None)",
        SLURM_0 + "(None): the scheduler has not placed it yet",
        "Slurm job 812 mnist-train: PENDING (Resources)", SLURM_WAITING["Resources"],
        "cannot read Slurm job 812 now, retrying: slurm_load_jobs error: Socket timed out on send/recv operation",
        "Slurm job 812 mnist-train: RUNNING for 00:00:01 on 2 nodes (gpu[01-02]), restarts 0",
        "Slurm job 812 mnist-train: FAILED, exit 78 (bad configuration: retrying cannot help, the Job fails) after "
        "00:00:09 (restarts 0)"]


def test_a_slurm_job_slurm_forgot_ends_the_wait_with_1():
    def reader(job_id):
        raise slurm_status.SlurmError("slurm_load_jobs error: Invalid job id specified")

    said: list[str] = []
    assert slurm_status.wait("812", 0, said.append, reader) == 1
    assert said == ["Slurm job 812 is no longer known to Slurm: its exit code is unknown"]


@pytest.mark.parametrize("conditions, expected", [
    ([], None), ([{"type": "Complete", "status": "True"}], 0), ([{"type": "Failed", "status": "True"}], 1),
    ([{"type": "Failed", "status": "False"}], None),
])
def test_a_jobs_state_ends_with_its_outcome_and_changes_with_its_pods_not_its_progress(conditions, expected):
    from status_views.kubernetes import job_state

    job = {"metadata": {"name": "mnist-train"}, "status": {"conditions": conditions, "active": 1}}
    pods = [pod("mnist-train-0-abcde", 0, "2026-11-24T11:55:00Z", "Running", {"running": {}})]
    state = job_state(job, pods, ["a line"])
    assert state.exit_code == expected and state.lines == ["a line"]
    assert job_state(job, pods, ["another progress line"]).change == state.change
    moved = [pod("mnist-train-0-abcde", 0, "2026-11-24T11:55:00Z", "Succeeded", {"terminated": {"exitCode": 0}})]
    assert job_state(job, moved, ["a line"]).change != state.change


def test_waiting_on_a_kubernetes_job_says_each_change_and_gives_up_on_a_deleted_one(monkeypatch):
    from status_views import kubernetes
    from status_views.view import follow

    replies = iter([kubernetes.KubectlError("Unable to connect to the server: dial tcp: i/o timeout"),
                    kubernetes.KubectlError('Error from server (NotFound): jobs.batch "mnist-train" not found'),
                    # no stage Job either (initializer.separate_job): the Job is gone
                    kubernetes.KubectlError('Error from server (NotFound): jobs.batch "mnist-train-stage" not found')])

    def kubectl(*args):
        raise next(replies)

    monkeypatch.setattr(kubernetes, "kubectl", kubectl)
    said: list[str] = []
    assert follow(lambda: kubernetes.read_state("team", "mnist-train"), 0, said.append, "Job team/mnist-train") == 1
    assert said == ["cannot read Job team/mnist-train now, retrying: Unable to connect to the server: dial tcp: i/o "
                    "timeout", "Job team/mnist-train is not on the cluster (deleted, or never applied)"]


@pytest.mark.parametrize(("conditions", "exit_code"), [
    ([], None),  # staging
    ([{"type": "Complete", "status": "True"}], None),  # ./run.sh applies the training Job next: no end of a wait
    ([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
       "message": "Job has reached the specified backoff limit"}], 1),  # ./run.sh applies nothing more
])
def test_before_the_training_job_is_applied_its_stage_jobs_state_is_the_view(monkeypatch, conditions, exit_code):
    """initializer.separate_job: ./run.sh applies the training Job once its stage Job completed; until then the
    view (and a wait) shows the stage Job and its pod, and a failed stage Job ends a wait with 1."""
    from status_views import kubernetes

    stage = {"metadata": {"name": "mnist-train-stage", "namespace": "ml"}, "spec": {"completions": 1},
             "status": {"active": 0 if conditions else 1, "conditions": conditions}}
    staging = pod("mnist-train-stage-0-aaaaa", 0, "2026-11-24T11:50:00Z", "Running",
                  {"running": {"startedAt": "2026-11-24T11:50:05Z"}}, container="stage")

    def kubectl(*args):
        if args[3:5] == ("job", "mnist-train"):
            raise kubernetes.KubectlError('Error from server (NotFound): jobs.batch "mnist-train" not found')
        if args[3:5] == ("job", "mnist-train-stage"):
            return json.dumps(stage)
        if args[3] == "pods":
            assert args[5] == "batch.kubernetes.io/job-name=mnist-train-stage"
            return json.dumps({"items": [staging]})
        raise kubernetes.KubectlError("no logs here")

    monkeypatch.setattr(kubernetes, "kubectl", kubectl)
    state = kubernetes.read_state("ml", "mnist-train")
    assert state.lines[0] == ("Job ml/mnist-train is applied once Job mnist-train-stage has staged the model and "
                              "data (initializer.separate_job):")
    assert any("mnist-train-stage-0-aaaaa" in line for line in state.lines), state.lines
    assert state.exit_code == exit_code


# --- a pod deleted whose node does not confirm its end (a node down or cut off): what its index waits for

def deleted_pod(deleted_at, node="gpu-node-7", disruption="DeletionByTaintManager", phase="Running"):
    pod = pending_pod(name="mnist-train-0-abcde", condition={"type": "PodScheduled", "status": "True"},
                      nodeName=node)
    pod["metadata"]["deletionTimestamp"] = deleted_at  # the API server's: when the grace period runs out
    pod["status"] = {"phase": phase, "containerStatuses": [{"name": "worker", "state": {
        "running": {"startedAt": "2026-11-24T11:00:00Z"}}}], "conditions": [
        {"type": "Ready", "status": "False"},
        *([{"type": "DisruptionTarget", "status": "True", "reason": disruption,
            "message": "Taint manager: deleting due to NoExecute taint"}] if disruption else [])]}
    return pod


ENDING = ("waiting: index 0 pod mnist-train-0-abcde Terminating: its end is unconfirmed {overdue} past its grace period "
          "({why}): node gpu-node-7's kubelet does not answer; the Job gives index 0 a new pod only once this one has "
          "ended (podReplacementPolicy: Failed, which a podFailurePolicy requires), and the gang's other pods wait in "
          "place for it (up to join_timeout_seconds): once node gpu-node-7 is down for good, mark it out of service: kubectl taint nodes "
          "gpu-node-7 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute (or kubectl delete node gpu-node-7); "
          "the pod then ends uncounted and index 0 starts elsewhere")


@pytest.mark.parametrize("pod, waiting", [
    (deleted_pod("2026-11-24T11:57:00Z"), [ENDING.format(overdue="3 min 00 s", why="DisruptionTarget "
                                                                                   "DeletionByTaintManager")]),
    (deleted_pod("2026-11-24T11:59:40Z", disruption=None), [ENDING.format(overdue="20 s", why="deleted")]),
    (deleted_pod("2026-11-24T11:59:50Z"), []),  # 10 s past its grace period: a kubelet may still confirm it
    (deleted_pod("2026-11-24T12:00:30Z"), []),  # within its grace period
    (deleted_pod("2026-11-24T11:50:00Z", phase="Failed"), []),  # ended: its kubelet confirmed it
    (deleted_pod("2026-11-24T11:50:00Z", node=None), []),  # never bound: the API server removes it at once
], ids=["evicted from an unreachable node", "deleted by hand", "ending as it should", "in its grace period",
        "ended", "never bound"])
def test_a_pod_whose_node_does_not_confirm_its_end_says_what_the_index_waits_for_and_what_to_do(pod, waiting):
    lines = describe(PENDING_JOB, [pod], None, NOW)
    assert [line for line in lines if line.startswith("waiting: ")] == waiting
    if pod["status"]["phase"] == "Running":
        assert lines[1] == "index 0: mnist-train-0-abcde Running for 1 h 00 min, Terminating"
