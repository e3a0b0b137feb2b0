"""The SFT model (worker/sft/model.py) on a tiny random Llama made on the spot (testbed/sft_data.py): LoRA trains
the adapters alone, a checkpoint holds them alone and puts them back, and the exports load as users load them
(PeftModel.from_pretrained; AutoModelForCausalLM.from_pretrained for the merged one) with the trained logits."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from testbed.sft_data import make_model  # noqa: E402
from trainer_runtime.hub_models.run import Refusal  # noqa: E402
from worker.sft import model as sft_model  # noqa: E402

LORA = sft_model.Lora(rank=4, alpha=8, dropout=0.0, target_modules=("q_proj", "v_proj"))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("base"))


def trained(model, seed: int = 1):
    """Adapters (or weights) moved off their initial values, as training would (LoRA's B starts at zero)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return model


def logits(model, ids=((5, 17, 42, 99, 3),)):
    model.eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids)).logits


def test_under_lora_only_the_adapters_train_and_a_checkpoint_holds_them_alone(base):
    model = sft_model.load(base, LORA)
    trainable = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    assert {name.split(".")[-4] for name in trainable} == {"q_proj", "v_proj"}  # ...q_proj.lora_A.default.weight
    state = sft_model.trainable_state(trained(model))
    assert state and all("lora_" in key for key in state)
    total = sum(parameter.numel() for parameter in model.parameters())
    assert sum(tensor.numel() for tensor in state.values()) < total / 10


def test_a_checkpoints_adapters_put_back_give_the_same_model(base):
    model = trained(sft_model.load(base, LORA))
    resumed = sft_model.load(base, LORA)
    assert not torch.equal(logits(model), logits(resumed))
    sft_model.load_trainable_state(resumed, sft_model.trainable_state(model))
    assert torch.equal(logits(model), logits(resumed))


def test_the_exports_load_as_users_load_them_and_agree(base, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = trained(sft_model.load(base, LORA))
    tokenizer = AutoTokenizer.from_pretrained(base)
    written = sft_model.export(model, tokenizer, tmp_path / "export", merged=True)
    assert written == [tmp_path / "export" / "adapter", tmp_path / "export" / "merged"]
    expected = logits(model)
    adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), tmp_path / "export" / "adapter")
    assert torch.allclose(logits(adapter), expected, atol=1e-6)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "export" / "merged")
    assert not hasattr(merged, "peft_config")
    assert torch.allclose(logits(merged), expected, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path / "export" / "merged").chat_template == tokenizer.chat_template
    assert torch.equal(logits(model), expected)  # the merge was a copy's: the trained model keeps its adapters


def test_a_full_fine_tune_trains_and_exports_the_whole_model(base, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = trained(sft_model.load(base, None))
    assert all(parameter.requires_grad for parameter in model.parameters())
    assert set(sft_model.trainable_state(model)) == set(model.state_dict())
    written = sft_model.export(model, AutoTokenizer.from_pretrained(base), tmp_path / "export", merged=False)
    assert written == [tmp_path / "export" / "merged"]
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(written[0])), logits(model))


def test_a_pickled_model_is_refused_before_loading(base, tmp_path):
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_bytes((base / "config.json").read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(Refusal, match="no safetensors weights") as refused:
        sft_model.load(pickled, LORA)
    assert refused.value.code == 78


def test_a_target_module_the_model_lacks_is_refused_naming_the_variable(base):
    with pytest.raises(Refusal, match="LORA_TARGET_MODULES: .*") as refused:
        sft_model.load(base, sft_model.Lora(4, 8, 0.0, ("c_attn",)))
    assert refused.value.code == 78
