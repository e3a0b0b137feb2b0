"""Strategy state in one process (pure logic, no peers): checkpoints written before strategies existed, with
torch.optim's own optimizer state (keyed by position) and a scheduler's keys in its groups, still resume."""

import torch
import torch.nn.functional as F

from trainer_runtime import strategies
from trainer_runtime.distenv import DistEnv
from worker.mnist.model import MnistCNN


def trained(steps=2):
    torch.manual_seed(0)
    model = MnistCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.004)
    torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.004, total_steps=10)  # adds initial_lr, max_lr, ...
    images, labels = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
    return model, optimizer


def test_an_old_checkpoint_loads_into_the_allreduce_strategy_and_keeps_the_gradient_views():
    model, optimizer = trained()
    old_state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    assert isinstance(old_state["optimizer"]["param_groups"][0]["params"][0], int)  # torch.optim's own form

    torch.manual_seed(1)
    parallel = strategies.build("allreduce", MnistCNN(), DistEnv(), torch.device("cpu"), "fp32")
    fresh = torch.optim.Adam(parallel.module.parameters(), lr=0.004)
    parallel.attach(fresh)
    parallel.load_full(old_state["model"], old_state["optimizer"])

    for name, tensor in model.state_dict().items():
        assert torch.equal(parallel.module.state_dict()[name], tensor), name
    for old, new in zip(model.parameters(), parallel.module.parameters()):
        assert torch.equal(optimizer.state[old]["exp_avg"], fresh.state[new]["exp_avg"])
        assert float(optimizer.state[old]["step"]) == float(fresh.state[new]["step"]) == 2
    assert parallel.grads.is_intact()  # the flat buffer still backs every .grad


def test_the_full_state_is_keyed_by_parameter_name():
    parallel = strategies.build("allreduce", MnistCNN(), DistEnv(), torch.device("cpu"), "fp32")
    parallel.attach(torch.optim.Adam(parallel.module.parameters()))
    parallel.zero_grad()
    F.cross_entropy(parallel.model(torch.randn(4, 1, 28, 28)), torch.tensor([0, 1, 2, 3])).backward()
    parallel.backward(None, 4, 4, False)
    parallel.step()
    model_state, optimizer_state = parallel.full_state()
    assert set(optimizer_state["state"]) == set(model_state) == {n for n, _ in parallel.module.named_parameters()}


def test_every_strategy_word_names_its_class():
    from trainer_contract.program_settings import STRATEGIES

    assert {name: strategies.strategy_class(name).name for name in STRATEGIES} == {name: name for name in STRATEGIES}
    assert [name for name in STRATEGIES if strategies.shards_parameters(name)] == ["fsdp", "hsdp"]


def test_the_trainable_state_holds_the_weights_that_train_and_puts_them_back_under_every_strategy_word():
    """What a LoRA checkpoint holds: the trained weights and their optimizer state by name, not the frozen ones;
    another model of the same shape takes them back exactly (one process: allreduce; fsdp and ddp under torchrun
    in tests/sft)."""
    def partly_frozen(seed):
        torch.manual_seed(seed)
        model = MnistCNN()
        for parameter in model.features[0].parameters():
            parameter.requires_grad_(False)
        parallel = strategies.build("allreduce", model, DistEnv(), torch.device("cpu"), "fp32")
        parallel.attach(torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.01))
        return parallel

    trained = partly_frozen(0)
    trained.zero_grad()
    F.cross_entropy(trained.model(torch.randn(4, 1, 28, 28)), torch.tensor([0, 1, 2, 3])).backward()
    trained.backward(None, 4, 4, False)
    trained.step()
    model_state, optimizer_state = trained.trainable_state()
    learnt = {name for name, p in trained.module.named_parameters() if p.requires_grad}
    assert set(model_state) == learnt and not any(name.startswith("features.0.") for name in model_state)
    assert set(optimizer_state["state"]) == learnt

    fresh = partly_frozen(1)
    fresh.load_trainable_state(model_state, optimizer_state)
    for name in learnt:
        assert torch.equal(fresh.module.state_dict()[name], trained.module.state_dict()[name]), name
    assert not torch.equal(fresh.module.features[0].weight, trained.module.features[0].weight)  # frozen: its own, untouched
    assert fresh.grads.is_intact()
    assert torch.equal(fresh.optimizer.state[fresh.module.classifier[3].weight]["exp_avg"],
                       trained.optimizer.state[trained.module.classifier[3].weight]["exp_avg"])


def test_fsdp_shards_a_hugging_face_model_per_block_and_then_the_model_inside_its_wrapper():
    transformers = __import__("pytest").importorskip("transformers")
    from trainer_runtime.strategies.fsdp import shard_units

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                      num_attention_heads=2, num_key_value_heads=2)
    language_model = transformers.LlamaForCausalLM(config)
    wrapper = torch.nn.ModuleDict({"base_model": language_model})  # as peft's PeftModel holds the model
    units, outer = shard_units(wrapper)
    assert outer is language_model  # generate() and the wrapper's forward both pass through its hooks
    assert units == list(language_model.model.layers)
    cnn = MnistCNN()
    units, outer = shard_units(cnn)
    assert outer is cnn and units == [layer for layer in cnn.modules() if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear))]
