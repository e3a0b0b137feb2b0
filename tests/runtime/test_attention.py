"""ATTN_IMPLEMENTATION reaches from_pretrained for every pretrained-model workload (trainer_runtime/pretrained/run.py
loading_options): the tests' tiny BERT and Llama load with the kernels named, "auto" leaves transformers' choice, and
flash_attention_2 without the flash-attn package is refused before any load, in one line (78)."""

import importlib.util

import pytest

from trainer_contract import exit_codes
from trainer_runtime.failures import Refusal
from trainer_runtime.pretrained.run import loading_options

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from testbed import qa_data, sft_data

    root = tmp_path_factory.mktemp("attention")
    return {"bert": (qa_data.make_model(root / "bert"), transformers.AutoModelForQuestionAnswering),
            "llama": (sft_data.make_model(root / "llama"), transformers.AutoModelForCausalLM)}


@pytest.mark.parametrize("name", ["bert", "llama"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_the_kernels_named_are_the_loaded_models(models, name, attention):
    directory, auto_class = models[name]
    model = auto_class.from_pretrained(directory, **loading_options(attention))
    assert model.config._attn_implementation == attention


def test_auto_leaves_transformers_choice_and_insists_on_safetensors(models):
    assert loading_options("auto") == {"use_safetensors": True}
    directory, auto_class = models["llama"]
    chosen = auto_class.from_pretrained(directory, **loading_options("auto")).config._attn_implementation
    assert chosen == auto_class.from_pretrained(directory).config._attn_implementation


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_flash_attention_without_its_package_is_refused_in_one_line():
    with pytest.raises(Refusal) as refused:
        loading_options("flash_attention_2")
    assert refused.value.code == exit_codes.BAD_CONFIG
    assert refused.value.problems == ["ATTN_IMPLEMENTATION: flash_attention_2 needs the flash-attn package (and CUDA "
                                      "GPUs), which this image does not have: install it into the image, or use sdpa"]


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
@pytest.mark.parametrize("module", ["worker.sft", "worker.finetune", "worker.qa"])
def test_the_check_config_init_container_refuses_flash_attention_it_cannot_load(module):
    """Refused by --check-config (torch-free, before the gang forms), as the pod's init container runs it."""
    import os
    import subprocess
    import sys

    from tests.conftest import OUTSIDE

    result = subprocess.run([sys.executable, "-m", module, "--check-config"], capture_output=True, text=True,
                            timeout=60, cwd=OUTSIDE, env={**os.environ, "ATTN_IMPLEMENTATION": "flash_attention_2"})
    assert result.returncode == exit_codes.BAD_CONFIG, result.stdout + result.stderr
    assert ("Rank 0: configuration error: ATTN_IMPLEMENTATION: flash_attention_2 needs the flash-attn package (and "
            "CUDA GPUs), which this image does not have: install it into the image, or use sdpa") in result.stderr
    assert "torch" not in result.stderr  # no traceback, nothing of torch
