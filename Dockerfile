# The worker image: torchrun's launcher (python -m worker.launch) running the built-in worker, as uid 10001.
#
#   docker build -t indexed-trainer/worker:0.1.0 .
#   mkdir -p pvc-home && docker run --rm --user "$(id -u):$(id -g)" -v "$PWD/pvc-home:/pvc-home" \
#       -e PET_NPROC_PER_NODE=2 indexed-trainer/worker:0.1.0
#
# Podman: the same two commands with podman for docker (rootless podman: add --userns=keep-id to podman run);
# buildah: buildah build --layers -t indexed-trainer/worker:0.1.0 . Docker's engine builds it with BuildKit, its
# default builder since Docker 23.0 (its classic builder, DOCKER_BUILDKIT=0, refuses RUN --mount).
#
# `docker run` trains on this machine (torchrun --standalone, PET_NPROC_PER_NODE processes) and leaves the
# model, metrics and checkpoints in pvc-home/runs/local/ (--user: the files are yours; without it the
# image's uid 10001 must be able to write pvc-home). The Job's manifests replace the command with the
# multi-pod torchrun line; everything else is the same image.
#
# PyTorch: the CPU-only build from TORCH_INDEX_URL when that index answers (an image of about 1.5 GB), else
# the package registry's (on x86_64 a CUDA build, about 6 GB), at the version of constraints.txt, which CI
# tests. --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 makes a CUDA image. Offline
# builds: wheels/README.md. PYTHON_IMAGE: any Debian-like image with python3 (3.10 or newer) and venv, named in
# full (registry/repository:tag): podman and buildah resolve a short name (python:3.11) only through
# registries.conf's aliases or search registries, which a registries.conf of one's own may lack.
#
# Layers: the pinned dependencies first (gigabytes, rebuilt only when constraints.txt changes), then the
# package itself (seconds): a code change does not reinstall torch or copy it again.

ARG PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS dependencies
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /src
COPY constraints.txt scripts/install.sh scripts/torch_download.py ./
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=wheels,target=/wheels \
    python3 -m venv /opt/venv \
    && PIP_FIND_LINKS=/wheels TORCH_INDEX_URL="${TORCH_INDEX_URL}" ./install.sh /opt/venv/bin/python \
        --requirement constraints.txt

FROM dependencies AS package
COPY pyproject.toml setup.cfg setup.py README.md ./
COPY trainer_contract ./trainer_contract
COPY trainer_stager ./trainer_stager
COPY trainer_launcher ./trainer_launcher
COPY trainer_runtime ./trainer_runtime
COPY generator ./generator
COPY localjob ./localjob
COPY status_views ./status_views
COPY worker ./worker
COPY templates ./templates
COPY variables ./variables
# The venv already has setuptools (torch requires it): no build environment to download.
RUN /opt/venv/bin/python -m pip wheel --no-deps --no-build-isolation --no-cache-dir --wheel-dir /dist .

# The image is the dependency stage itself, plus the user and the package: nothing copies the gigabytes of
# the venv again, and a code change rebuilds only the last two layers.
FROM dependencies
# uid/gid 10001, above the range of host users (checkov CKV_K8S_40), is the manifests' runAsUser,
# runAsGroup and fsGroup (values: security.*).
RUN groupadd --gid 10001 trainer \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /pvc-home --shell /usr/sbin/nologin trainer \
    && mkdir -p /pvc-home \
    && chown 10001:10001 /pvc-home
COPY --from=package /dist /tmp/dist
# Its [worker,staging,hf,lightning] requirements are already in the venv: pip installs the package alone, and
# fails offline if setup.cfg gained a dependency that constraints.txt does not pin.
RUN /opt/venv/bin/python -m pip install --no-cache-dir --find-links /tmp/dist \
        "$(ls /tmp/dist/*.whl)[worker,staging,hf,lightning]" \
    && rm -rf /tmp/dist
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    DATA_DIR=/pvc-home/data \
    OUTPUT_DIR=/pvc-home/runs/local \
    PET_NPROC_PER_NODE=1
WORKDIR /pvc-home
USER 10001:10001
# Exec form, no shell: the launcher (torchrun's, exiting with the worker's code) is PID 1 and receives
# SIGTERM, which it forwards to the workers.
ENTRYPOINT ["python", "-m", "worker.launch"]
CMD ["--standalone", "-m", "worker"]
