"""The worker image, built from the Dockerfile as users build it (the README's commands with podman, buildah, and
the docker CLI against podman's socket) and run as users and the Job's pods run it.

The runs as the Job's pods run use the restricted pod's settings (read-only root, uid 10001, no capabilities, no privilege
escalation, tmpfs /tmp, /dev/shm), and `podman diff` shows that nothing was written outside /tmp and the
volume. Exit codes are read from podman itself (tests/image/podman.py says why).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from localjob.ports import free_port
from testbed.mnist_data import dataset_files, write_raw
from tests.conftest import BIN, ROOT
from tests.image.conftest import UNTRACKED_BULK
from tests.long_setup import long_setup

pytestmark = [pytest.mark.slow, pytest.mark.image]
UID = 10001
RESTRICTED = ["--read-only", f"--user={UID}:{UID}", "--cap-drop=ALL", "--security-opt=no-new-privileges",
              "--tmpfs=/tmp", "--shm-size=256m"]


def volume(tmp_path: Path, name: str = "pvc-home") -> Path:
    """A volume directory the pod's uid owns, as the Job's fsGroup makes it."""
    directory = tmp_path / name
    directory.mkdir()
    os.chown(directory, UID, UID)
    return directory


def logs(podman, name: str) -> str:
    result = podman("logs", name, check=False)
    return result.stdout + result.stderr


def wait(podman, name: str, timeout: float = 600) -> int:
    podman("wait", name, timeout=timeout)
    return podman.exit_code(name)


# What podman itself mounts into every container (its own /etc/hosts, ...): shown as changes by `podman diff`.
RUNTIME_MOUNTS = {"/etc", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run", "/run/.containerenv"}


def written_outside_the_volume(podman, name: str) -> list[str]:
    """What the container changed in its image's file system (volumes and tmpfs mounts are not in it)."""
    changes = [line.split(None, 1) for line in podman("diff", name).stdout.splitlines() if line.strip()]
    return [f"{kind} {path}" for kind, path in changes if path not in RUNTIME_MOUNTS]


def test_restricted_pod_trains_the_offline_sample_to_the_documented_accuracy(podman, image, tmp_path):
    home = volume(tmp_path)
    name = f"it-restricted-{os.getpid()}"
    podman("run", "--name", name, *RESTRICTED, "--network=none", "-v", f"{home}:/pvc-home",
           "-e", "PET_NPROC_PER_NODE=2", "-e", "MNIST_SAMPLE_FALLBACK=true", image, timeout=900, check=False)
    try:
        output = logs(podman, name)
        assert podman.exit_code(name) == 0, output[-4000:]
        summary = json.loads((home / "runs" / "local" / "model.json").read_text())
        assert summary["data"] == "mnist-sample"
        assert summary["accuracy"] >= 0.985  # README: 99.0% on the sample with the default values
        assert "Rank 1: training completed." in output
        assert written_outside_the_volume(podman, name) == []
    finally:
        podman("rm", "--force", name, check=False)


def test_sigterm_mid_epoch_exits_143_with_a_checkpoint_and_the_rerun_resumes(podman, image, tmp_path):
    home = volume(tmp_path)
    write_raw(home / "data", dataset_files())
    os.system(f"chown -R {UID}:{UID} {home}")
    name = f"it-sigterm-{os.getpid()}"
    run = ["--name", name, *RESTRICTED, "--network=none", "-v", f"{home}:/pvc-home", "-e", "PET_NPROC_PER_NODE=2",
           "-e", "EPOCHS=3", "-e", "LOG_INTERVAL=5", "-e", "BATCH_SIZE=32", image]
    podman("run", "--detach", *run)
    try:
        deadline = time.monotonic() + 300
        while "epoch: 2/3, batch: 10/" not in logs(podman, name):
            assert time.monotonic() < deadline and podman("inspect", "--format", "{{.State.Running}}", name).stdout
            time.sleep(0.5)
        podman("stop", "--time", "60", name, timeout=120)
        assert podman.exit_code(name) == 143, logs(podman, name)[-3000:]
        checkpoints = sorted(path.name for path in (home / "runs" / "local" / "checkpoints").iterdir())
        assert any(file.startswith("ckpt-e0001-s") and file != "ckpt-e0001-s000000.pt" for file in checkpoints), \
            checkpoints
        assert written_outside_the_volume(podman, name) == []
    finally:
        podman("rm", "--force", name, check=False)
    result = podman("run", "--rm", *run[2:], timeout=600, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert re.search(r"resuming from ckpt-e0001-s0*[1-9]", result.stdout + result.stderr)
    assert "epoch: 1/3" not in result.stdout + result.stderr


def pod_container_args(job: dict, config: dict, container: dict, index: int, home: Path) -> list[str]:
    """`podman run` arguments for one container of pod ``index``, as kubelet would start it: the ConfigMap's
    environment, the Job's own variables, $(VAR) expanded, the volume mounts and the security context."""
    pod = job["spec"]["template"]["spec"]
    env = dict(config["data"])
    for item in container.get("env", []):
        source = item.get("valueFrom", {})
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in source:  # the completion index annotation
            env[item["name"]] = str(index)
        elif "resourceFieldRef" in source:  # limits.cpu, divisor 1: one core each on this 2-core machine
            env[item["name"]] = "1"
    argv = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), part)
            for part in [*container.get("command", []), *container.get("args", [])]]
    security, pod_security = container["securityContext"], pod["securityContext"]
    args = [f"--user={pod_security['runAsUser']}:{pod_security['runAsGroup']}", "--tmpfs=/tmp", "--shm-size=256m",
            "--network=host", f"--hostname={job['metadata']['name']}-{index}"]
    if security.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if security.get("allowPrivilegeEscalation") is False:
        args.append("--security-opt=no-new-privileges")
    args += [f"--cap-drop={cap}" for cap in security.get("capabilities", {}).get("drop", [])]
    for mount in container.get("volumeMounts", []):
        if mount["name"] == "shared":
            args += ["-v", f"{home}:{mount['mountPath']}"]
    for name, value in env.items():
        args += ["-e", f"{name}={value}"]
    return [*args, "--entrypoint", argv[0], "IMAGE", *argv[1:]]


@contextlib.contextmanager
def job_pods(podman, image, job: dict, config: dict, home: Path, secret: dict[str, str] | None = None):
    """The Job's pods as kubelet runs them, on the host network: every pod's init containers in order, each
    to completion, then the main containers together; ``secret``: the variables a Secret gives (envFrom).
    Yields the main containers' names, their exit codes and every container's output; removes them after."""
    pod = job["spec"]["template"]["spec"]
    # The rendezvous address <job>-0.<service> names pod 0: on the host network, that is this machine.
    leader = f"--add-host={job['metadata']['name']}-0.{pod['subdomain']}:127.0.0.1"
    secret_args = [arg for name, value in (secret or {}).items() for arg in ("-e", f"{name}={value}")]
    names: list[str] = []
    outputs: list[str] = []
    try:
        for index in range(job["spec"]["completions"]):
            for init in pod["initContainers"]:
                args = pod_container_args(job, config, init, index, home)
                checked = podman("run", "--rm", leader, *secret_args, *[image if a == "IMAGE" else a for a in args],
                                 timeout=300, check=False)
                outputs.append(checked.stdout + checked.stderr)
                assert checked.returncode == 0, outputs[-1]
        for index in range(job["spec"]["completions"]):
            (main,) = pod["containers"]
            names.append(f"it-pod-{index}-{os.getpid()}")
            args = pod_container_args(job, config, main, index, home)
            podman("run", "--detach", "--name", names[-1], leader, *secret_args,
                   *[image if a == "IMAGE" else a for a in args])
        codes = [wait(podman, name) for name in names]
        outputs += [logs(podman, name) for name in names]
        yield names, codes, outputs
    finally:
        for name in names:
            podman("rm", "--force", name, check=False)


def test_the_rendered_jobs_two_pods_check_config_then_complete(podman, image, tmp_path):
    port = free_port()
    rendered = subprocess.run([str(BIN / "gen-manifests"), "--set", f"master_port={port}",
                               "--set", "config_map.EPOCHS='1'", "--set", "replicas=2"],
                              capture_output=True, text=True, check=True, timeout=60)
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.stdout)}
    job, config = documents["Job"], documents["ConfigMap"]
    home = volume(tmp_path)
    write_raw(home / "data", dataset_files())
    os.system(f"chown -R {UID}:{UID} {home}")
    with job_pods(podman, image, job, config, home) as (names, codes, outputs):
        assert codes == [0, 0], "\n".join(output[-2000:] for output in outputs)
        output_dir = Path(str(home) + config["data"]["OUTPUT_DIR"].removeprefix("/pvc-home"))
        assert json.loads((output_dir / "model.json").read_text())["accuracy"] > 0.9
        for name in names:
            assert written_outside_the_volume(podman, name) == []


def test_mnist_from_a_bucket_trains_mirrors_and_exports_in_the_image(podman, image, tmp_path):
    """The image as a Job with a bucket for everything (moto on this machine, credentials as a Secret gives
    them): index 0's stage init container fetches the digits once, index 1's waits for it; rank 0 mirrors each
    checkpoint; index 0's launcher uploads the export, which round-trips."""
    from testbed.storage_servers import S3Server

    s3 = S3Server()
    try:
        client = s3.with_mnist("team-ckpt", "team-models")
        rendered = subprocess.run(
            [str(BIN / "gen-manifests"), "--set", f"master_port={free_port()}", "--set", "replicas=2",
             "--set", "config_map={EPOCHS: '2', DOWNLOAD: 'false'}",
             "--set", "initializer.dataset.storage_uri=s3://team-data/mnist",
             "--set", "checkpoint.storage_uri=s3://team-ckpt/mnist", "--set", "export.storage_uri=s3://team-models/run-1",
             "--set", "env_from_secrets=[s3-credentials]",
             "--set", f"env=[{{name: AWS_ENDPOINT_URL, value: '{s3.url}'}}, {{name: AWS_DEFAULT_REGION, value: us-east-1}}]"],
            capture_output=True, text=True, check=True, timeout=60)
        documents = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.stdout)}
        job, config = documents["Job"], documents["ConfigMap"]
        home = volume(tmp_path)
        secret = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        with job_pods(podman, image, job, config, home, secret) as (names, codes, outputs):
            text = "\n".join(outputs)
            assert codes == [0, 0], text[-4000:]
            assert "stage: dataset s3://team-data/mnist staged at /pvc-home/staged/datasets/s3/team-data%2Fmnist in" in text
            assert "by index 0" in text  # index 1's stage container found it staged
            assert "Rank 0: checkpoint mirror: uploaded 1 file" in text
            output_dir = home / "runs" / job["metadata"]["name"]
            checkpoint = "ckpt-e0002-s000000.pt"
            mirrored = client.get_object(Bucket="team-ckpt", Key=f"mnist/{checkpoint}/{checkpoint}")["Body"].read()
            assert mirrored == (output_dir / "checkpoints" / checkpoint).read_bytes()
            exported = client.get_object(Bucket="team-models", Key="run-1/model.pt")["Body"].read()
            assert exported == (output_dir / "model.pt").read_bytes()
            assert json.loads((output_dir / "model.json").read_text())["accuracy"] > 0.9
            for name in names:
                assert written_outside_the_volume(podman, name) == []
    finally:
        s3.close()


def test_the_stage_init_container_stages_a_hub_model_once_in_the_restricted_pod(podman, image, tmp_path):
    """The image's stager as the Job's "stage" init container runs it (read-only root, uid 10001, the Hub on
    this machine through HF_ENDPOINT): the model lands on the volume, verified, once; nothing is written
    outside /tmp and the volume; index 1 finds it staged."""
    from testbed.storage_servers import HubServer

    hub = HubServer()
    files = {"config.json": b'{"hidden_size": 32}\n', "model.safetensors": os.urandom(200_000)}
    commit = hub.add("org/tiny-bert", files)
    try:
        rendered = subprocess.run(
            [str(BIN / "gen-manifests"), "--set", "initializer.model.storage_uri=hf://org/tiny-bert",
             "--set", f"env=[{{name: HF_ENDPOINT, value: '{hub.url}'}}]"],
            capture_output=True, text=True, check=True, timeout=60)
        documents = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.stdout)}
        job, config = documents["Job"], documents["ConfigMap"]
        stage = next(c for c in job["spec"]["template"]["spec"]["initContainers"] if c["name"] == "stage")
        home = volume(tmp_path)
        outputs = []
        for index in (0, 1):
            name = f"it-stage-{index}-{os.getpid()}"
            args = pod_container_args(job, config, stage, index, home)
            podman("run", "--name", name, *[image if a == "IMAGE" else a for a in args], timeout=300, check=False)
            try:
                outputs.append(logs(podman, name))
                assert podman.exit_code(name) == 0, outputs[-1]
                assert written_outside_the_volume(podman, name) == []
            finally:
                podman("rm", "--force", name, check=False)
        place = home / "staged/models/hf/org--tiny-bert/main"
        assert (place / "model.safetensors").read_bytes() == files["model.safetensors"]
        assert sorted(hub.fetched()) == sorted(f"/org/tiny-bert/resolve/{commit}/{name}" for name in files)
        assert "staged at /pvc-home/staged/models/hf/org--tiny-bert/main" in outputs[0]
        assert "by index 0" in outputs[1]
    finally:
        hub.close()


@pytest.mark.parametrize(("example", "serve", "export", "score"), [
    ("bert-squad", "testbed.qa_data:serve_squad_example", "bert_squad_trained", "f1"),
    ("hub-finetune", "testbed.text_data:serve_imdb_example", "bert_classifier_trained", "accuracy"),
    ("sft", "testbed.sft_data:serve_capybara_example", "llama_sft_trained/merged", "loss"),
])
def test_the_seeds_transformer_examples_stage_train_and_export_in_the_restricted_pods(podman, image, tmp_path,
                                                                                      example, serve, export, score):
    """examples/bert-squad (Lightning FSDP), examples/hub-finetune (DDP + AMP) and examples/sft (LoRA through
    peft) as the Job's two pods run them from the image: index 0 stages the model and the dataset from the Hub (the tests' own, HF_ENDPOINT), both
    train, evaluate and export with save_pretrained, writing nothing outside /tmp and the volume."""
    import importlib

    from testbed.storage_servers import HubServer

    hub = HubServer()
    try:
        module, function = serve.split(":")
        getattr(importlib.import_module(module), function)(hub)
        rendered = subprocess.run(
            [str(BIN / "gen-manifests"), "--values", str(ROOT / "examples" / example / "values.yaml"),
             "--set", f"master_port={free_port()}", "--set", "resources.cpu=1", "--set", "resources.memory=4",
             "--set", f"env=[{{name: HF_ENDPOINT, value: '{hub.url}'}}]"],
            capture_output=True, text=True, check=True, timeout=60)
        documents = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.stdout)}
        job, config = documents["Job"], documents["ConfigMap"]
        home = volume(tmp_path)
        with job_pods(podman, image, job, config, home) as (names, codes, outputs):
            text = "\n".join(outputs)
            assert codes == [0, 0], text[-4000:]
            assert "Traceback" not in text, text[-4000:]
            output_dir = home / "runs" / example
            summary = json.loads((output_dir / "summary.json").read_text())
            assert summary["world_size"] == 2 and 0 <= summary[score] <= 100
            assert {"config.json", "model.safetensors", "tokenizer.json"} <= \
                {path.name for path in (output_dir / export).iterdir()}
            for name in names:
                assert written_outside_the_volume(podman, name) == []
    finally:
        hub.close()


README_TAG = "indexed-trainer/worker:0.1.0"


def readme_image_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## On a cluster\n(.*?)^## ", readme, re.S | re.M)
    assert match, "the README has no On a cluster section"
    return match.group(1)


def readme_image_commands() -> dict[str, str]:
    """The README's image commands, as written in its "On a cluster" section: the `docker build` and the
    `... docker run` lines of its sh blocks (continuation lines joined, comments cut) and the buildah command
    of its text."""
    section = readme_image_section()
    lines = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M):
        lines += [line.split("  #")[0].strip() for line in re.sub(r"\\\n\s*", " ", block).splitlines()]
    commands = {"build": [line for line in lines if line.startswith("docker build ")],
                "run": [line for line in lines if re.search(r"\bdocker run\b", line)],
                "buildah": re.findall(r"`(buildah build [^`]*)`", section)}
    assert all(len(found) == 1 for found in commands.values()), commands
    return {key: found[0] for key, found in commands.items()}


def bash(command: str, cwd: Path, env: dict, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def readme_tag(podman):
    """The README's tag, which the README's commands build: removed afterwards (the image keeps its other
    names; its layers stay for the next build). podman names it localhost/...; podman's Docker API, for the
    docker CLI, docker.io/... where no localhost/... image exists."""
    names = [f"{registry}/{README_TAG}" for registry in ("localhost", "docker.io")]
    for name in names:
        podman("rmi", name, check=False)
    yield README_TAG
    for name in names:
        podman("rmi", name, check=False)


def test_the_readme_image_commands_work_with_podman_as_written(podman, image, checkout, readme_tag):
    """What a podman user types, as the README tells them (docker -> podman), in their checkout: the build
    (no --build-arg; the session's layers make it seconds) and the run, whose model lands in pvc-home."""
    assert "type `podman` for `docker`" in readme_image_section()
    commands = readme_image_commands()
    assert commands["build"] == f"docker build -t {README_TAG} ."
    build, run = (re.sub(r"\bdocker\b", "podman", commands[key]) for key in ("build", "run"))
    started = time.monotonic()
    result = bash(build, cwd=checkout, env=podman.env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "--> Using cache" in dependency_step(output)
    print(f"{build}: {time.monotonic() - started:.0f} s")
    home = checkout / "pvc-home"
    shutil.rmtree(home, ignore_errors=True)
    # MNIST is there already (no network here: the download's stand-in); one epoch, for time.
    write_raw(home / "data", dataset_files())
    assert run.startswith("mkdir -p pvc-home && podman run --rm ") and run.endswith(f" {README_TAG}"), run
    run = run.removesuffix(f" {README_TAG}") + f" -e EPOCHS=1 {README_TAG}"
    try:
        started = time.monotonic()
        result = bash(run, cwd=checkout, env=podman.env, timeout=900)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        print(f"{run}: {time.monotonic() - started:.0f} s")
        model = home / "runs" / "local" / "model.json"
        assert json.loads(model.read_text())["data"] == "mnist"
        assert model.stat().st_uid == os.getuid()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_buildah_builds_the_readme_image_as_written(podman, image, checkout, readme_tag):
    """buildah build, as the README writes it, from the layers podman built (the same storage): the same image."""
    command = readme_image_commands()["buildah"]
    assert command == f"buildah build --layers -t {README_TAG} .", command
    started = time.monotonic()
    result = bash(command, cwd=checkout, env=podman.env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    print(f"{command}: {time.monotonic() - started:.0f} s")
    assert "--> Using cache" in dependency_step(output)
    ids = [podman("image", "inspect", "--format", "{{.Id}}", name).stdout for name in (image, README_TAG)]
    assert ids[0] == ids[1]


def header_commands() -> list[str]:
    """The Dockerfile header's commands (its `#   ` indented lines, continuation lines joined), as written."""
    lines = [line[1:] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("#   ")]
    return [line.strip() for line in re.sub(r"\\\n\s*", " ", "\n".join(lines)).splitlines()]


@pytest.fixture(scope="session")
def docker(podman, tmp_path_factory):
    """The docker CLI talking to podman's API socket (there is no Docker engine here)."""
    if not shutil.which("docker"):
        pytest.skip("no docker CLI on this machine")
    socket_path = tmp_path_factory.mktemp("podman-service") / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket_path}"],
                               env=podman.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not socket_path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        yield {**os.environ, "DOCKER_HOST": f"unix://{socket_path}"}
    finally:
        service.terminate()
        service.wait(timeout=30)


def context_bytes(sent: str) -> float:
    """The docker CLI's "Sending build context to Docker daemon  3.072GB" size, in bytes (decimal units)."""
    match = re.search(r"Sending build context to Docker daemon\s+([\d.]+)\s*([kMG]?B)", sent)
    assert match, sent[-3000:]
    return float(match.group(1)) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[match.group(2)]


def test_the_dockerfile_header_commands_work_as_written_with_the_docker_cli(podman, image, checkout, docker,
                                                                           readme_tag, tmp_path, request):
    """The header's two commands, the README's, through the docker CLI against podman's socket. Without the buildx
    plugin the CLI uses Docker's classic build API, which podman serves with buildah (RUN --mount included; a
    Docker engine's classic builder refuses it). The CLI sends the checkout as .dockerignore filters it: not the
    .venv/ and runs/ beside the sources. Its images are Docker's format, podman's OCI: its layers are its own
    (the first build on a machine installs the releases once more; later builds take seconds)."""
    build, run = header_commands()
    commands = readme_image_commands()
    assert (build, run) == (commands["build"], commands["run"]), "the README and the Dockerfile header differ"
    started = time.monotonic()
    # a new machine's first build of Docker's format installs the releases once more: minutes, outside the clock
    with long_setup(request, "image tests: docker build through podman's socket (Docker's image format: on a new "
                    "machine its layers are built once more)", 2400):
        result = bash(build, cwd=checkout, env=docker, timeout=2400)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    print(f"DOCKER_HOST=... {build}: {time.monotonic() - started:.0f} s")
    built = re.search(r"^Successfully built ([0-9a-f]{12})$", output, re.M)
    assert built, output[-3000:]
    files = sum(path.stat().st_size for path in checkout.rglob("*") if path.is_file())
    assert context_bytes(output) < files - sum(UNTRACKED_BULK.values()) + 5e6, output[:2000]
    write_raw(tmp_path / "pvc-home" / "data", dataset_files())  # no network here: the download's stand-in
    name = f"it-header-{os.getpid()}"
    # As written, one epoch; without --rm, since podman's API answers 0 to `docker run --rm` whatever the code:
    # it is read from podman.
    assert run.startswith("mkdir -p pvc-home && docker run --rm ") and run.endswith(f" {README_TAG}"), run
    run = run.replace("docker run --rm ", "docker run ").removesuffix(f" {README_TAG}") + \
        f" --name {name} -e EPOCHS=1 {README_TAG}"
    try:
        result = bash(run, cwd=tmp_path, env=docker, timeout=900)
        assert podman.exit_code(name) == 0, (result.stdout + result.stderr)[-3000:]
        assert podman("inspect", "--format", "{{.Image}}", name).stdout.startswith(built.group(1))
        model = tmp_path / "pvc-home" / "runs" / "local" / "model.json"
        assert json.loads(model.read_text())["data"] == "mnist" and model.stat().st_uid == os.getuid()
    finally:
        podman("rm", "--force", name, check=False)


def test_podman_and_buildah_know_the_base_images_registry_without_short_name_aliases(podman, checkout, tmp_path):
    """A user's own registries.conf (~/.config/containers/) replaces the system's short-name aliases: a base named
    python:3.11-slim-bookworm then stops both with "short-name ... did not resolve to an alias and no
    unqualified-search registries are defined". The Dockerfile names it in full, so in an empty image store both
    go to docker.io for it (which this registries.conf blocks: no network, the same answer everywhere)."""
    from tests.image.conftest import default_python_image

    home = tmp_path / "home"
    (home / ".config" / "containers").mkdir(parents=True)
    (home / ".config" / "containers" / "registries.conf").write_text('[[registry]]\nlocation = "docker.io"\n'
                                                                     "blocked = true\n")
    for tool in ("podman", "buildah"):
        # An empty store (vfs: one that mounts nothing); podman wants a runroot path of at most 50 characters.
        with tempfile.TemporaryDirectory(prefix="it-", dir="/tmp") as runroot:
            store = ["--root", str(tmp_path / tool), "--runroot", runroot, "--storage-driver", "vfs"]
            result = subprocess.run([tool, *store, "build", "."], cwd=checkout, env={**podman.env, "HOME": str(home)},
                                    stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        output = result.stdout + result.stderr
        assert result.returncode != 0 and "short-name" not in output, f"{tool}: {output[-2000:]}"
        assert f"Trying to pull {default_python_image()}" in output, f"{tool}: {output[-2000:]}"
        assert "registry docker.io is blocked" in output, f"{tool}: {output[-2000:]}"


def test_a_volume_the_image_user_cannot_write_is_one_clear_line(podman, image, tmp_path):
    home = tmp_path / "root-owned"
    home.mkdir()  # created by root, as `docker run -v DIR:...` creates a missing DIR
    result = podman("run", "--rm", "--network=none", "-v", f"{home}:/pvc-home", image, check=False, timeout=300)
    assert result.returncode == 78, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "not writable by uid 10001" in errors[0] and "chown" in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def dependency_step(output: str) -> str:
    """The build output's step that installs the pinned releases (podman's and buildah's STEP lines)."""
    steps = re.split(r"\n(?=(?:\[\d+/\d+\] )?STEP \d+/\d+)", output)
    found = [step for step in steps if "--requirement constraints.txt" in step.split("\n", 1)[0]]
    assert found, output[-3000:]
    return found[0]


def test_a_code_change_rebuilds_without_reinstalling_the_pinned_releases(podman, image, checkout):
    marker = f"# rebuilt by the image tests {os.getpid()}\n"
    source = checkout / "worker" / "__init__.py"
    original = source.read_text()
    source.write_text(original + marker)
    tag = f"{image}-rebuilt"
    try:
        started = time.monotonic()
        result = podman("build", "--tag", tag, ".", cwd=checkout, timeout=1200)
        print(f"rebuilt after a code change in {time.monotonic() - started:.0f} s")
        assert "--> Using cache" in dependency_step(result.stdout + result.stderr)
        shown = podman("run", "--rm", "--network=none", "--entrypoint", "python", tag, "-c",
                       "import worker; print(open(worker.__file__).read())")
        assert marker in shown.stdout
    finally:
        source.write_text(original)
        podman("rmi", "--force", tag, check=False)
