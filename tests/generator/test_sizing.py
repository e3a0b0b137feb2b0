"""Warnings from the model's size (generator/sizing.py): initializer.model.weights_gib against a pod's memory, the
shared volume and the choice of fsdp for LoRA, through the CLI as users run it: the warnings on stderr, the render
itself unchanged."""

from __future__ import annotations

import pytest

from tests.generator.helpers import run_main

GPU_NODES = ("entrypoint.module=worker.sft", "resources.gpu.accelerator_count=8", "resources.memory=256",
             "resources.cpu=32", "shared_volume.size=100", "replicas=2")
FSDP_LORA = ("STRATEGY=fsdp with LoRA on a model of 15.2 GiB (initializer.model.weights_gib), which one GPU holds (up to "
             "40 GiB: under half of an 80 GB GPU): ddp keeps a frozen copy on each GPU and all-reduces only the "
             "adapters' gradients, where fsdp all-gathers the frozen base at every step")
SET_DDP = "set config_map.STRATEGY: ddp unless the GPUs are smaller"
MEMORY = ("each of a pod's 8 processes loads the whole model (initializer.model.weights_gib 15.2 GiB) into host memory "
          "before it moves to a GPU: 121.6 GiB at once, over resources.memory 64 GiB; raise resources.memory")


def full_volume(keep: int, need: float, size: int, best: bool = False) -> str:
    kept = "KEEP_CHECKPOINTS and the best, METRIC_FOR_BEST_MODEL" if best else "KEEP_CHECKPOINTS"
    return (f"the shared volume holds the staged model (15.2 GiB), {keep} checkpoint(s) of about 45.6 GiB "
            f"({kept}; the weights and AdamW's two moments) and the export (15.2 GiB): about {need:g} GiB, "
            f"over shared_volume.size {size} GiB; raise it")


CASES = {
    "fsdp for LoRA on a model one GPU holds, two nodes": (
        ("config_map.STRATEGY=fsdp",), [FSDP_LORA + " across the nodes; " + SET_DDP]),
    "the same on one node": (("config_map.STRATEGY=fsdp", "replicas=1"), [FSDP_LORA + "; " + SET_DDP]),
    "hsdp alike": (("config_map.STRATEGY=hsdp",),
                   [FSDP_LORA.replace("STRATEGY=fsdp", "STRATEGY=hsdp") + " across the nodes; " + SET_DDP]),
    "ddp for LoRA": ((), []),
    "fsdp for LoRA on a model over 40 GiB": (
        ("config_map.STRATEGY=fsdp", "initializer.model.weights_gib=60", "resources.memory=600"), []),
    "fsdp for LoRA without GPUs": (
        ("config_map.STRATEGY=fsdp", "resources.gpu.accelerator_count=0", "local_device_count=2"), []),
    "a full fine-tune's checkpoints over the volume": (
        ("config_map.LORA_RANK=0",), [full_volume(2, 121.6, 100)]),
    "a full fine-tune on a volume that holds it": (
        ("config_map.LORA_RANK=0", "shared_volume.size=200"), []),
    "KEEP_CHECKPOINTS counts": (("config_map.LORA_RANK=0", "shared_volume.size=200",
                                 "config_map.KEEP_CHECKPOINTS=4"), [full_volume(4, 212.8, 200)]),
    # 2 checkpoints (121.6 GiB in all) fit 150 GiB; with the best beside them, 3 do not
    "the best checkpoint is kept beside them": (("config_map.LORA_RANK=0", "shared_volume.size=150",
                                                 "config_map.METRIC_FOR_BEST_MODEL=loss"),
                                                [full_volume(3, 167.2, 150, best=True)]),
    "LoRA's merged export": (("config_map.EXPORT_MERGED=true", "shared_volume.size=20"), [
        "the shared volume holds the staged model (15.2 GiB), LoRA's checkpoints (the adapters) and the export "
        "(15.2 GiB): about 30.4 GiB, over shared_volume.size 20 GiB; raise it"]),
    "an existing claim's size is not known": (
        ("config_map.LORA_RANK=0", "shared_volume.existing_claim=datasets"), []),
    "every process's copy over a pod's memory": (("resources.memory=64",), [MEMORY]),
    "the MNIST worker has no pretrained model": (("entrypoint.module=worker", "resources.memory=2"), []),
    "a program of the user's": (("entrypoint.module=train", "resources.memory=2"), []),
    "the size unknown": (("initializer.model.weights_gib=null", "resources.memory=2"), []),
}


@pytest.mark.parametrize(("sets", "expected"), CASES.values(), ids=CASES.keys())
def test_the_models_size_warns_of_what_will_not_fit_and_changes_nothing_rendered(sets, expected):
    args = [arg for item in (*GPU_NODES, "initializer.model.weights_gib=15.2", *sets) for arg in ("--set", item)]
    rendered = run_main(*args)
    assert rendered.exit_code == 0, rendered.stderr
    assert rendered.stderr.splitlines() == [f"gen-manifests: warning: {line}" for line in expected]
    without = run_main(*args, "--set", "initializer.model.weights_gib=null")
    assert rendered.stdout == without.stdout and without.stderr == ""


def test_on_slurm_the_shared_directory_has_no_size_and_memory_still_counts():
    nodes = [item for item in GPU_NODES if not item.startswith("shared_volume.")]  # not a key of Slurm's
    args = [arg for item in (*nodes, "initializer.model.weights_gib=15.2", "config_map.LORA_RANK=0",
                             "resources.memory=64") for arg in ("--set", item)]
    rendered = run_main("--target", "slurm", *args)
    assert rendered.exit_code == 0, rendered.stderr
    assert rendered.stderr.splitlines() == [f"gen-manifests: warning: {MEMORY}"]


def test_a_size_that_is_not_a_positive_number_is_refused_naming_the_key():
    refused = run_main("--set", "initializer.model.weights_gib=0")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "initializer.model.weights_gib" in refused.stderr
