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
    from trainer_contract.variables import STRATEGIES

    assert {name: strategies.strategy_class(name).name for name in STRATEGIES} == {name: name for name in STRATEGIES}
    assert [name for name in STRATEGIES if strategies.shards_parameters(name)] == ["fsdp"]
