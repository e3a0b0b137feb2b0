"""The SFT model (worker/sft/model.py) on a tiny random Llama made on the spot (testbed/sft_data.py): LoRA trains
the adapters alone, a checkpoint holds them alone and puts them back, and the exports load as users load them
(PeftModel.from_pretrained; AutoModelForCausalLM.from_pretrained for the merged one) with the trained logits."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from testbed.sft_data import make_model  # noqa: E402
from trainer_runtime.failures import Refusal  # noqa: E402
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


def learnt(model) -> dict:
    """What a checkpoint holds of the model (the strategy's trainable_state, in one process)."""
    return {name: parameter.detach().clone() for name, parameter in model.named_parameters() if parameter.requires_grad}


def test_under_lora_only_the_adapters_train_and_a_checkpoint_holds_them_alone(base):
    model = sft_model.load(base, LORA)
    trainable = list(learnt(model))
    assert trainable and all("lora_" in name for name in trainable)
    assert {name.split(".")[-4] for name in trainable} == {"q_proj", "v_proj"}  # ...q_proj.lora_A.default.weight
    total = sum(parameter.numel() for parameter in model.parameters())
    assert sum(tensor.numel() for tensor in learnt(model).values()) < total / 10


def test_the_trained_adapters_put_into_the_pretrained_model_give_the_trained_model(base):
    model = trained(sft_model.load(base, LORA))
    assert not torch.equal(logits(model), logits(sft_model.load(base, LORA)))
    assert torch.equal(logits(model), logits(sft_model.rebuilt(base, LORA, learnt(model))))
    partial = dict(list(learnt(model).items())[1:])
    with pytest.raises(RuntimeError, match="do not fit the model .*missing"):
        sft_model.rebuilt(base, LORA, partial)


def test_activation_checkpointing_gives_the_same_gradients(base):
    ids = torch.tensor([[5, 17, 42, 99, 3, 8]])
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)  # the same initial adapters
        model = trained(sft_model.load(base, LORA, activation_checkpointing=recompute))
        model.train()
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad})
    assert model.get_base_model().is_activation_checkpointing
    assert grads[0].keys() == grads[1].keys() and all(torch.allclose(grads[0][k], grads[1][k], atol=1e-6)
                                                      for k in grads[0])


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
    assert set(learnt(model)) == {name for name, _ in model.named_parameters()}
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
