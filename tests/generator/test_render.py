"""The rendered manifests: upstream Kubernetes schemas and the Job's contract (whole renders: test_goldens.py)."""

import re

import kubernetes_validate
import pytest
import yaml

from generator.resources import default_values_path
from generator.targets.kubernetes import MIN_KUBERNETES, job_objects, render_manifests, to_stream
from generator.validation import validate_values
from generator.values import apply_set, resolve_values
from tests.custom_resources import CUSTOM_RESOURCES, strict_custom_resource
from tests.generator.helpers import run_main

# The oldest release we support (every Job field we use is GA there) and the newest the validator ships.
KUBERNETES_VERSIONS = [MIN_KUBERNETES, kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version())]

PLATFORM = [
    "name=team-train", "queue_name=team-a", "workload_priority_class=research",
    "queue_topology.required=cloud.provider.com/topology-block", "scheduler_name=scheduler-plugins-scheduler",
    "affinity={nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: "
    "[{key: node.kubernetes.io/instance-type, operator: In, values: [p5.48xlarge]}]}]}}, podAntiAffinity: "
    "{preferredDuringSchedulingIgnoredDuringExecution: [{weight: 50, podAffinityTerm: {topologyKey: "
    "kubernetes.io/hostname, labelSelector: {matchExpressions: [{key: team, operator: NotIn, values: [a]}]}}}]}}",
    "topology_spread_constraints=[{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
    "whenUnsatisfiable: DoNotSchedule, minDomains: 1}]",
    "pod_labels={scheduling.x-k8s.io/pod-group: team-train}", "pod_annotations={sidecar.istio.io/inject: 'false'}",
    "resources.ephemeral_storage=50", "resources.cpu_limit=false", "metrics.pod_monitor=true",
    "tolerations=[{key: spot, operator: Exists, effect: NoSchedule}]",
]
MATRIX = {
    "cpu-default": [],
    "cpu-one-replica": ["replicas=1"],
    "cpu-many-replicas": ["replicas=1000", "name=big"],
    "cpu-fractional": ["resources.cpu=0.5", "resources.memory=1.5", "shm_size=0.25", "local_device_count=1"],
    "gpu": ["resources.gpu.accelerator_count=8", "resources.gpu.accelerator=NVIDIA-H100-80GB-HBM3",
            "resources.cpu=32", "resources.memory=256"],
    "gpu-fewer-processes": ["resources.gpu.accelerator_count=4", "local_device_count=2"],
    "existing-claim": ["shared_volume.existing_claim=team-data"],
    "everything": ["queue_name=team-a", "priority_class_name=low", "service_account_name=trainer",
                   "active_deadline_seconds=3600", "ttl_seconds_after_finished=null",
                   "image_pull_secrets=[regcred]", "node_selector={zone: a}", "labels={team: a}",
                   "annotations={note: 'x: y'}", "tolerations=[{key: spot, operator: Exists, effect: NoSchedule}]",
                   "shared_volume.storage_class=fast"],
    "own-program": ["entrypoint.module=null", "entrypoint.script=train.py", "entrypoint.args=['--epochs', '3']",
                    "working_dir=/app", "config_map={FOLDER_NAME: test}",
                    "env=[{name: HF_TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}, "
                    "{name: SETTINGS, valueFrom: {configMapKeyRef: {name: team-settings, key: s, optional: true}}}, "
                    "{name: MODE, value: fast}]",
                    "env_from_secrets=[wandb]",
                    "extra_volumes=[{name: creds, mount_path: /etc/creds, secret: creds}, "
                    "{name: settings, mount_path: /etc/settings, config_map: team-settings}, "
                    "{name: datasets, mount_path: /datasets, claim: team-datasets, read_only: true}, "
                    "{name: scratch, mount_path: /scratch, empty_dir: {size: 10}}]"],
    # every pod a replica group, its Lighthouse beside the Job, and the policies between them; it may grow to 6
    "replica-groups": ["name=mnist-groups", "replicas=3", "fault_tolerance.replica_groups=true",
                       "fault_tolerance.min_replicas=2", "fault_tolerance.max_replicas=6", "network_policy.enabled=true",
                       "priority_class_name=high"],
    "own-module-with-the-launcher": ["entrypoint.module=my_pkg.train", "entrypoint.launcher=indexed-trainer",
                                     "resources.gpu.accelerator_count=2"],
    # a built-in workload: its own --check-config and the defaults it shows, its variables checked
    "fine-tuning": ["name=hub-finetune", "entrypoint.module=worker.finetune",
                    "initializer.model.storage_uri=hf://distilbert/distilbert-base-uncased",
                    "initializer.dataset.storage_uri=hf://datasets/stanfordnlp/imdb",
                    "config_map={PRECISION: bf16, CHECKPOINT_EVERY_STEPS: '25'}"],
    "question-answering": ["name=bert-squad", "entrypoint.module=worker.qa",
                           "initializer.model.storage_uri=hf://google-bert/bert-base-uncased",
                           "initializer.dataset.storage_uri=hf://datasets/rajpurkar/squad",
                           "config_map={STRATEGY: fsdp, PRECISION: bf16, MAX_SEQ_LENGTH: '256'}"],
    "supervised-fine-tuning": ["name=qwen-sft", "entrypoint.module=worker.sft",
                               "initializer.model.storage_uri=hf://Qwen/Qwen2.5-0.5B-Instruct",
                               "initializer.dataset.storage_uri=hf://datasets/HuggingFaceTB/smoltalk",
                               "config_map={LORA_RANK: '16', PRECISION: bf16, PACKING: 'true'}"],
    # a program of the user's whose checkpoints the launcher mirrors to a bucket and the stage step restores
    "own-program-with-a-checkpoint-bucket": ["entrypoint.module=my_pkg.train", "working_dir=/app",
                                             "checkpoint.storage_uri=s3://team-checkpoints/own",
                                             "env_from_secrets=[s3-credentials]"],
    "staged-from-hub-and-bucket": ["entrypoint.module=my_pkg.finetune",
                                   "initializer.model.storage_uri=hf://google-bert/bert-base-uncased@main",
                                   "initializer.dataset.storage_uri=s3://datasets/squad/v2",
                                   "export.storage_uri=s3://models/bert-squad",
                                   "env_from_secrets=[s3-credentials]",
                                   "env=[{name: HF_TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}]"],
    "dataset-from-a-secret": ["name=presigned-finetune", "entrypoint.module=worker.finetune",
                              "initializer.model.storage_uri=hf://distilbert/distilbert-base-uncased",
                              "initializer.dataset.storage_uri_secret={name: presigned-urls, key: imdb}"],
    # the job's own NetworkPolicy: the Hub on 443 outside the cluster, MinIO in the cluster, Prometheus scraping
    "network-policy": ["network_policy.enabled=true", "metrics.enabled=true", "network_policy.metrics_namespace=monitoring",
                       "network_policy.egress=[{cidr: 0.0.0.0/0, except: [10.0.0.0/8, 169.254.169.254/32], ports: [443]}, "
                       "{namespace: storage, pod_labels: {app: minio}, ports: [9000]}]",
                       "initializer.model.storage_uri=hf://distilbert/distilbert-base-uncased",
                       "checkpoint.storage_uri=s3://team-checkpoints/mnist", "storage_secret=s3-credentials"],
    # a multi-node GPU job on InfiniBand: the RDMA device plugin's resource and huge pages beside the GPUs, NCCL's
    # verbs transport on
    "rdma-and-hugepages": ["replicas=2", "resources.gpu.accelerator_count=8", "resources.gpu.network=infiniband",
                           "resources.extra={rdma/ib: 1, hugepages-2Mi: 1Gi}"],
    # a platform team's shared cluster: placement, Kueue's topology and priority, pod-only metadata, the quota's
    # shape (local disk, CPU without a limit) and the Prometheus Operator's PodMonitor
    "platform": PLATFORM,
    # the stage step as a Job of its own: no GPU held while the model downloads
    "separate-stage-job": ["initializer.separate_job=true", "initializer.model.storage_uri=hf://org/model",
                           "resources.gpu.accelerator_count=8", "resources.cpu=32", "resources.memory=256",
                           "network_policy.egress=[{cidr: 0.0.0.0/0, ports: [443]}]"],
}


def render(*sets: str) -> list[dict]:
    values = resolve_values(default_values_path(), [], sets)
    return [yaml.safe_load(m.text) for m in render_manifests(validate_values(values))]


def job_of(docs):
    """The training Job: the last Job (a stage Job of its own comes before it: initializer.separate_job)."""
    return [doc for doc in docs if doc["kind"] == "Job"][-1]


def test_rendering_is_deterministic():
    values = validate_values(resolve_values(default_values_path(), [], ["labels={b: '2', a: '1'}"]))
    assert to_stream(render_manifests(values)) == to_stream(render_manifests(values))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_object_passes_strict_kubernetes_schema(case, version):
    docs = render(*MATRIX[case])
    for doc in docs:
        if doc["kind"] in CUSTOM_RESOURCES:  # the Prometheus Operator's: its CRD's schema, as strictly
            strict_custom_resource(doc)
            continue
        # strict: unknown fields fail too. A missing schema raises SchemaNotFoundError, failing the test.
        assert kubernetes_validate.validate(doc, version, strict=True) == version


def test_schema_validator_rejects_a_broken_job():
    """The schema check above can fail: an unknown field and a wrong type are caught."""
    job = job_of(render())
    job["spec"]["completionz"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, MIN_KUBERNETES, strict=True)
    with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "NoSuchKind"}, MIN_KUBERNETES, strict=True)


@pytest.mark.parametrize("sets, config", [
    ((), {"INDEXED_TRAINER_RESTART_IN_PLACE": "true", "INDEXED_TRAINER_MAX_RESTARTS": "3"}),
    (("restart_in_place=false", "max_restarts=5"),
     {"INDEXED_TRAINER_RESTART_IN_PLACE": "false", "INDEXED_TRAINER_MAX_RESTARTS": "5"}),
    (("entrypoint.script=train.py",), {}),  # a program of one's own is restarted as it always was
])
def test_the_launcher_learns_whether_to_restart_in_place_and_the_jobs_uid(sets, config):
    docs = render(*sets)
    data = next(doc for doc in docs if doc["kind"] == "ConfigMap")["data"]
    assert {key: data[key] for key in data if key in ("INDEXED_TRAINER_RESTART_IN_PLACE",
                                                      "INDEXED_TRAINER_MAX_RESTARTS")} == config
    pod = job_of(docs)["spec"]["template"]["spec"]
    uid = {"name": "INDEXED_TRAINER_JOB_UID", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}}
    assert uid in pod["containers"][0]["env"]  # the failed rounds are counted under the Job's uid
    assert all(uid not in init["env"] for init in pod.get("initContainers", []))


def test_job_is_an_indexed_gang_with_the_launcher_as_main_process():
    job = job_of(render("replicas=3", "master_port=23456"))
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 3
    # a gang restart costs one counted failure (the root cause's), so max_restarts is the limit itself
    assert spec["backoffLimit"] == spec["backoffLimitPerIndex"] == 3 and spec["maxFailedIndexes"] == 0
    assert spec["podReplacementPolicy"] == "Failed"
    rules = spec["podFailurePolicy"]["rules"]
    # bad configuration from any container fails the Job; disruptions and a peer's victims are not counted
    assert rules[0] == {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [78, 79, 80]}}
    assert rules[1] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[2] == {"action": "Ignore", "onExitCodes": {"containerName": "worker", "operator": "In", "values": [75, 81, 82]}}
    assert len(rules) == 3
    # the leader decides: index 0 succeeding completes the Job
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "mnist-train" and pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    worker = pod["containers"][0]
    assert worker["command"] == ["python", "-m", "worker.launch"]  # torchrun, exiting with the worker's code
    assert worker["args"] == [
        "--nnodes=3", "--nproc-per-node=1", "--node-rank=$(JOB_COMPLETION_INDEX)",
        "--master-addr=mnist-train-0.mnist-train", "--master-port=23456", "--max-restarts=0",
        "--rdzv-conf=timeout=600", "--shutdown-timeout=55", "-m", "worker",
    ]
    env = {item["name"]: item for item in worker["env"]}
    # the server's defaulted form (apiVersion v1): without it, a server-side apply after a client-side one
    # conflicted on this field
    assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"] == {
        "apiVersion": "v1", "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    assert env["OMP_NUM_THREADS"]["valueFrom"]["resourceFieldRef"]["resource"] == "limits.cpu"
    assert env["PYTHONUNBUFFERED"]["value"] == "1"
    config_map = next(doc for doc in render("replicas=3", "master_port=23456") if doc["kind"] == "ConfigMap")
    assert worker["envFrom"] == [{"configMapRef": {"name": config_map["metadata"]["name"]}}]
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    assert mounts["/pvc-home"] == "shared" and mounts["/dev/shm"] == "dshm"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == "mnist-train-data"
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    init = pod["initContainers"][0]
    assert init["command"] == ["python", "-m", "worker", "--check-config"]
    # the check sees the worker's variables (the Job's uid, for the launcher's count of rounds, is the worker's alone)
    assert init["env"] == worker["env"][:-2] and init["envFrom"] == worker["envFrom"]


def test_cpu_job_has_no_gpu_limit_and_gpu_job_has_one():
    cpu_limits = job_of(render())["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert cpu_limits == {"cpu": "2", "memory": "4Gi"}
    gpu_job = job_of(render("resources.gpu.accelerator_count=4", "resources.gpu.accelerator=A100"))
    pod = gpu_job["spec"]["template"]["spec"]
    # quantities as the server stores them (strings): an integer 4 made every re-apply report "configured"
    resources = pod["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "4"
    assert all(isinstance(value, str) for part in resources.values() for value in part.values())
    assert "--nproc-per-node=4" in pod["containers"][0]["args"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "A100"}


def test_extra_resources_are_requested_and_limited_beside_the_gpus():
    pod = job_of(render("resources.gpu.accelerator_count=8", "resources.extra={rdma/ib: 1, hugepages-2Mi: 1Gi}"))
    resources = pod["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "8", "hugepages-2Mi": "1Gi",
                                   "rdma/ib": "1"}
    assert resources["requests"] == {"cpu": "2", "memory": "4Gi", "hugepages-2Mi": "1Gi", "rdma/ib": "1"}


@pytest.mark.parametrize("extra, problem", [
    ("{nvidia.com/gpu: 8}", "resources.extra.nvidia.com/gpu: set resources.gpu.accelerator_count instead"),
    ("{memory: 8}", "resources.extra.memory: set resources.memory instead"),
    ("{ib: 1}", "resources.extra.ib: not a resource name: an extended resource has a domain prefix"),
    ("{rdma/ib: '0.5'}", 'resources.extra.rdma/ib: "0.5": an extended resource is asked for in whole units'),
    ("{hugepages-1Gi: lots}", 'resources.extra.hugepages-1Gi: "lots" is not a positive quantity'),
])
def test_extra_resources_the_api_server_would_refuse_are_refused_naming_the_key(extra, problem):
    from tests.generator.helpers import run_main

    result = run_main("--set", f"resources.extra={extra}")
    assert result.exit_code != 0 and result.stdout == "" and problem in result.stderr, result.stderr


def test_pods_meet_the_restricted_pod_security_standard():
    pod = job_of(render())["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["fsGroup"] == 10001
    for container in pod["containers"] + pod["initContainers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert "add" not in context["capabilities"]


def test_service_is_headless_and_selects_exactly_the_job_pods():
    docs = render()
    service = next(doc for doc in docs if doc["kind"] == "Service")
    pod_labels = job_of(docs)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["name"] == job_of(docs)["spec"]["template"]["spec"]["subdomain"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_config_map_carries_the_training_environment_as_strings():
    config = next(doc for doc in render("config_map.EPOCHS=7", "config_map.LEARNING_RATE=0.003")
                  if doc["kind"] == "ConfigMap")
    assert config["data"]["EPOCHS"] == "7"
    assert config["data"]["LEARNING_RATE"] == "0.003"
    assert config["data"]["DATA_DIR"] == "/pvc-home/data"
    assert config["data"]["OUTPUT_DIR"] == "/pvc-home/runs/mnist-train"


def config_map_of(*sets: str) -> dict:
    return next(doc for doc in render(*sets) if doc["kind"] == "ConfigMap")


def test_config_map_is_immutable_and_named_by_its_content():
    default = config_map_of()
    assert default["immutable"] is True
    assert re.fullmatch(r"mnist-train-config-[0-9a-f]{10}", default["metadata"]["name"])
    # a changed setting is a new ConfigMap (a running Job keeps its own); anything else keeps the name
    changed = config_map_of("config_map.LEARNING_RATE=0.003")
    assert changed["metadata"]["name"] != default["metadata"]["name"]
    assert config_map_of("replicas=5", "image=other:1")["metadata"]["name"] == default["metadata"]["name"]
    # same content, same name, whatever the order the values came in
    assert (config_map_of("config_map={SEED: '1', EPOCHS: '2'}")["metadata"]["name"]
            == config_map_of("config_map={EPOCHS: '2', SEED: '1'}")["metadata"]["name"])
    # the Job's pods and init container use exactly that ConfigMap
    docs = render("config_map.LEARNING_RATE=0.003")
    pod = job_of(docs)["spec"]["template"]["spec"]
    for container in pod["containers"] + pod["initContainers"]:
        assert container["envFrom"] == [{"configMapRef": {"name": changed["metadata"]["name"]}}]


def test_own_program_runs_under_plain_torchrun_without_check_config():
    pod = job_of(render(*MATRIX["own-program"]))["spec"]["template"]["spec"]
    worker = pod["containers"][0]
    assert "initContainers" not in pod
    assert worker["command"] == ["torchrun"] and worker["workingDir"] == "/app"
    assert worker["args"][-3:] == ["train.py", "--epochs", "3"]  # each argument as one, no shell
    assert {"secretRef": {"name": "wandb"}} in worker["envFrom"]
    env = {item["name"]: item for item in worker["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    mounts = {m["name"]: m for m in worker["volumeMounts"]}
    assert mounts["creds"] == {"name": "creds", "mountPath": "/etc/creds", "readOnly": True}
    assert mounts["datasets"]["readOnly"] is True and "readOnly" not in mounts["scratch"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["creds"]["secret"] == {"secretName": "creds"}
    assert volumes["datasets"]["persistentVolumeClaim"] == {"claimName": "team-datasets"}
    assert volumes["scratch"]["emptyDir"] == {"sizeLimit": "10Gi"}
    # the launcher can be asked for (an image built FROM the worker's): the codes then reach the Job
    launched = job_of(render(*MATRIX["own-module-with-the-launcher"]))["spec"]["template"]["spec"]["containers"][0]
    assert launched["command"] == ["python", "-m", "worker.launch"] and launched["args"][-2:] == ["-m", "my_pkg.train"]


def test_gpu_renders_carry_nccl_settings_that_bound_a_dead_peer():
    data = config_map_of("resources.gpu.accelerator_count=8")["data"]
    assert data["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" and data["TORCH_NCCL_ENABLE_MONITORING"] == "1"
    assert int(data["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]) > 0
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in config_map_of()["data"]  # CPU: no NCCL
    overridden = config_map_of("resources.gpu.accelerator_count=8", "config_map.TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC='60'")
    assert overridden["data"]["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "60"


NCCL_TRANSPORT = ("NCCL_IB_DISABLE", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD")


@pytest.mark.parametrize("network, rendered", [
    ("null", {}),  # NCCL's own detection: none of its transport variables
    ("infiniband", {"NCCL_IB_DISABLE": "0"}),
    ("tcp", {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"}),
])
def test_the_network_presets_nccls_transport_on_both_targets_and_config_map_overrides_each(network, rendered):
    sets = ["resources.gpu.accelerator_count=8", f"resources.gpu.network={network}"]
    data = config_map_of(*sets)["data"]
    assert {key: data[key] for key in NCCL_TRANSPORT if key in data} == rendered
    assert data["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"  # beside the watchdog's, whatever the network
    script = run_main("--target", "slurm", *[arg for item in sets for arg in ("--set", item)]).stdout
    assert {key: value for key, value in rendered.items() if f"export {key}={value}\n" in script} == rendered
    assert all(f"export {key}=" not in script for key in NCCL_TRANSPORT if key not in rendered)
    if rendered:
        overridden = config_map_of(*sets, "config_map.NCCL_IB_DISABLE='1'", "config_map.NCCL_SOCKET_IFNAME=ens1f0")
        assert overridden["data"]["NCCL_IB_DISABLE"] == "1" and overridden["data"]["NCCL_SOCKET_IFNAME"] == "ens1f0"


def test_a_network_preset_without_gpus_is_refused_naming_the_key():
    result = run_main("--set", "resources.gpu.network=tcp")
    assert result.exit_code != 0 and result.stdout == ""
    assert "resources.gpu.network: 'tcp' presets NCCL, which a job without GPUs does not use " \
           "(resources.gpu.accelerator_count is 0)" in result.stderr


def test_max_restarts_zero_still_renders_a_valid_job():
    spec = job_of(render("max_restarts=0"))["spec"]
    assert spec["backoffLimit"] == spec["backoffLimitPerIndex"] == 0
    kubernetes_validate.validate(job_of(render("max_restarts=0")), MIN_KUBERNETES, strict=True)


def test_existing_claim_replaces_the_new_claim():
    docs = render("shared_volume.existing_claim=team-data")
    assert "PersistentVolumeClaim" not in [doc["kind"] for doc in docs]
    volumes = {v["name"]: v for v in job_of(docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == "team-data"


def test_queue_name_labels_and_suspends_the_job_only():
    job = job_of(render("queue_name=team-a"))
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True
    assert "kueue.x-k8s.io/queue-name" not in job["spec"]["template"]["metadata"]["labels"]


def test_output_size_does_not_grow_with_replicas():
    small = to_stream(render_manifests(validate_values(apply_set(
        resolve_values(default_values_path(), []), "replicas=1", as_string=False))))
    large = to_stream(render_manifests(validate_values(apply_set(
        resolve_values(default_values_path(), []), "replicas=10000", as_string=False))))
    assert abs(len(large) - len(small)) < 40  # only the digits of a few numbers differ


def test_derived_numbers():
    spec = validate_values(resolve_values(default_values_path(), [], ["resources.gpu.accelerator_count=8",
                                                                       "replicas=4", "max_restarts=2"]))
    derived = job_objects(spec, spec.options["kubernetes"])
    assert spec.procs_per_node == 8 and derived.backoff_limit == 2
