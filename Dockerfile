# The worker image: python -m worker under torchrun, CPU PyTorch by default.
#
#   docker build -t indexed-trainer/worker:0.1.0 .
#   docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 -t indexed-trainer/worker:0.1.0-cuda .
#   docker run --rm -v "$PWD/pvc-home:/pvc-home" -e PET_NPROC_PER_NODE=2 indexed-trainer/worker:0.1.0
#
# `docker run` trains on this machine (torchrun --standalone; PET_NPROC_PER_NODE processes). The Job's
# manifests replace the command with the multi-pod torchrun line; everything else is the same image.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /src
COPY pyproject.toml setup.cfg README.md ./
COPY generator ./generator
COPY worker ./worker
COPY templates ./templates
COPY variables ./variables
# The same install as the tests' (.ci/run): the package with its [worker] extra, torch pinned to the tested release.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" \
        "torch==2.14.1" "torchvision==0.29.1" \
    && /opt/venv/bin/pip install --no-cache-dir ".[worker]"

FROM ${PYTHON_IMAGE}
# uid/gid 10001, above the range of host users (checkov CKV_K8S_40), is the manifests' runAsUser,
# runAsGroup and fsGroup (values: security.*).
RUN groupadd --gid 10001 trainer \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /pvc-home --shell /usr/sbin/nologin trainer \
    && mkdir -p /pvc-home \
    && chown 10001:10001 /pvc-home
COPY --from=build /opt/venv /opt/venv
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
