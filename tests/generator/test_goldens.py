"""Whole renders, byte for byte, for every values shape the suite covers and both targets (torchx's golden
tests): a refactoring of the generator must leave every file unchanged; a deliberate change of a render is
accepted with UPDATE_GOLDEN=1 and shows in review as a diff of these files."""

import os
from pathlib import Path

import pytest

from tests.generator.helpers import run_main
from tests.generator.test_render import MATRIX

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
SLURM_MATRIX = {
    "default": [],
    "gpu": ["resources.gpu.accelerator_count=8", "resources.cpu=32", "resources.memory=256", "replicas=4"],
    "site-options": ["slurm.partition=gpu", "slurm.account=ml", "slurm.qos=high", "slurm.time_limit='01:30:00'",
                     "slurm.shared_dir=/scratch/team/mnist", "termination_grace_period_seconds=120",
                     "slurm.setup=['module load cuda/12.4', 'source /opt/envs/torch/bin/activate']",
                     "slurm.extra_options=['--constraint=a100', '--exclusive']", "config_map={EPOCHS: '3', STRATEGY: fsdp}"],
    "fine-tuning": ["name=hub-finetune", "entrypoint.module=worker.finetune",
                    "initializer.model.storage_uri=hf://distilbert/distilbert-base-uncased",
                    "initializer.dataset.storage_uri=hf://datasets/stanfordnlp/imdb",
                    "config_map={PRECISION: bf16, WARMUP_STEPS: '10'}"],
    "question-answering": ["name=bert-squad", "entrypoint.module=worker.qa",
                           "initializer.model.storage_uri=hf://google-bert/bert-base-uncased",
                           "initializer.dataset.storage_uri=hf://datasets/rajpurkar/squad",
                           "config_map={STRATEGY: fsdp, PRECISION: bf16}"],
    "supervised-fine-tuning": ["name=qwen-sft", "entrypoint.module=worker.sft",
                               "initializer.model.storage_uri=hf://Qwen/Qwen2.5-0.5B-Instruct",
                               "initializer.dataset.storage_uri=hf://datasets/HuggingFaceTB/smoltalk",
                               "config_map={LORA_RANK: '16', PRECISION: bf16, PACKING: 'true'}"],
    "replica-groups": ["replicas=3", "fault_tolerance.replica_groups=true", "fault_tolerance.min_replicas=2"],
    "own-program-with-a-checkpoint-bucket": ["entrypoint.module=my_pkg.train", "slurm.shared_dir=/scratch/team",
                                             "checkpoint.storage_uri=s3://team-checkpoints/own"],
    "staged": ["entrypoint.module=my_pkg.finetune", "slurm.shared_dir=/scratch/team",
               "initializer.model.storage_uri=hf://google-bert/bert-base-uncased@v1.0",
               "initializer.dataset.storage_uri=https://data.example.com/squad/squad-v2.tar.gz",
               "export.storage_uri=s3://models/bert-squad"],
    "dataset-from-a-secret": ["name=presigned-finetune", "entrypoint.module=worker.finetune",
                              "initializer.model.storage_uri=hf://distilbert/distilbert-base-uncased",
                              "initializer.dataset.storage_uri_secret={name: presigned-urls, key: imdb}",
                              "checkpoint.storage_uri=s3://team-ckpt/imdb",
                              "checkpoint.signing_secret={name: ckpt-signing, key: key}"],
}
CASES = [("kubernetes", name, sets, "yaml") for name, sets in MATRIX.items()] + \
        [("slurm", name, sets, "sbatch") for name, sets in SLURM_MATRIX.items()]


@pytest.mark.parametrize("target, name, sets, suffix", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_render_matches_its_golden_file(target, name, sets, suffix):
    args = ["--target", target]
    for item in sets:
        args += ["--set", item]
    result = run_main(*args)
    assert result.exit_code == 0, result.stderr
    golden = GOLDEN / target / f"{name}.{suffix}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(result.stdout, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden}: run with UPDATE_GOLDEN=1 to write it"
    assert result.stdout == golden.read_text(encoding="utf-8"), \
        f"{golden.name} changed: run with UPDATE_GOLDEN=1 to accept a deliberate change"
