"""storage_secret: the storage credentials reach only the containers that reach storage (the stage step; the
worker only where it mirrors checkpoints or uploads the export), never the config check; env_from_secrets still
reaches every container. On Slurm the key means nothing (no Secrets there) and is named as ignored."""

from __future__ import annotations

import pytest
import yaml

from tests.generator.helpers import run_main

BUCKET = "s3://team-models/run"


def secrets_by_container(*sets: str) -> dict[str, list[str]]:
    args = [arg for item in ("entrypoint.module=worker.finetune", *sets) for arg in ("--set", item)]
    result = run_main(*args)
    assert result.exit_code == 0, result.stderr
    job = next(doc for doc in yaml.safe_load_all(result.stdout) if doc["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    return {container["name"]: [source["secretRef"]["name"] for source in container.get("envFrom", [])
                                if "secretRef" in source]
            for container in pod.get("initContainers", []) + pod["containers"]}


@pytest.mark.parametrize(("sets", "expected"), [
    ([f"initializer.model.storage_uri={BUCKET}"],
     {"check-config": [], "stage": ["minio"], "worker": []}),
    ([f"initializer.model.storage_uri={BUCKET}", f"checkpoint.storage_uri={BUCKET}-ckpt"],
     {"check-config": [], "stage": ["minio"], "worker": ["minio"]}),
    ([f"export.storage_uri={BUCKET}-export"],
     {"check-config": [], "worker": ["minio"]}),
    ([f"initializer.model.storage_uri={BUCKET}", "env_from_secrets=[wandb]"],
     {"check-config": ["wandb"], "stage": ["wandb", "minio"], "worker": ["wandb"]}),
])
def test_the_storage_credentials_reach_only_the_containers_that_reach_storage(sets, expected):
    assert secrets_by_container("storage_secret=minio", *sets) == expected


def test_a_bucket_with_a_storage_secret_needs_no_other_credentials_and_slurm_names_it_ignored():
    refused = run_main("--set", "entrypoint.module=worker.finetune", "--set", f"initializer.model.storage_uri={BUCKET}")
    assert refused.exit_code == 2 and "as storage_secret" in refused.stderr
    on_slurm = run_main("--target", "slurm", "--set", "storage_secret=minio")
    assert on_slurm.exit_code == 0 and "ignored on Slurm: storage_secret" in on_slurm.stderr
