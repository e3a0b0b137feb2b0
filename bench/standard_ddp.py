"""The standard way to train MNIST with DDP, as tutorials and pytorch/examples write it: the baseline.

torchvision's MNIST with per-sample transforms (ToTensor, Normalize), a DataLoader with a
DistributedSampler, a DDP-wrapped CNN shaped like pytorch/examples' mnist (two 3x3 convolutions, dropout,
9216 -> 128 -> 10), Adadelta (lr 1.0, StepLR gamma 0.7), batch 64, test accuracy after every epoch.

    torchrun --standalone --nproc-per-node 2 -m bench.standard_ddp --data-dir DIR --epochs 14
    torchrun --standalone --nproc-per-node 2 -m bench.standard_ddp --data-dir DIR --model worker   # our CNN
    torchrun --standalone --nproc-per-node 2 -m bench.standard_ddp --data-dir DIR --recipe worker --epochs 5

``--recipe worker`` keeps the standard loop (torchvision dataset, DataLoader, DistributedSampler, DDP) but trains
the worker's model with the worker's recipe: Adam at 0.004 under the same one-cycle schedule over the same epochs,
batch 64 per process, no dropout network. Against it, the worker's time to accuracy isolates the trainer's
mechanics (in-memory shards, one all-reduce, no per-sample transforms) from its recipe.

Rank 0 prints "epoch N test accuracy=A images/s=R" after each epoch (R per process).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms

from trainer_runtime import process_group


class ExamplesNet(nn.Module):
    """The network of pytorch/examples' mnist/main.py (about 1.2 M parameters, 12 M multiply-adds)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return self.fc2(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (smoke runs)")
    parser.add_argument("--model", choices=("examples", "worker"), default="examples")
    parser.add_argument("--recipe", choices=("examples", "worker"), default="examples",
                        help="examples: Adadelta + StepLR, as pytorch/examples; worker: the worker's model, Adam "
                             "and one-cycle schedule")
    args = parser.parse_args()

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    process_group.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train = datasets.MNIST(args.data_dir, train=True, download=False, transform=transform)
    test = datasets.MNIST(args.data_dir, train=False, download=False, transform=transform)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=1)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    test_loader = DataLoader(test, batch_size=1000)
    if args.model == "worker" or args.recipe == "worker":
        from worker.mnist.model import MnistCNN

        model = MnistCNN()
    else:
        model = ExamplesNet()
    model = DistributedDataParallel(model)
    if args.recipe == "worker":
        from trainer_contract.program_settings import TrainConfig

        defaults = TrainConfig()
        optimizer = torch.optim.Adam(model.parameters(), lr=defaults.learning_rate)
        # the worker's schedule, stepped per batch (batch_scheduler), over the same number of steps
        batch_scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=defaults.learning_rate, total_steps=args.epochs * len(loader), pct_start=0.15)
        scheduler = None
    else:
        optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        batch_scheduler = None
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        started, images = time.perf_counter(), 0
        for step, (data, target) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.nll_loss(F.log_softmax(model(data), dim=1), target)
            loss.backward()
            optimizer.step()
            if batch_scheduler:
                batch_scheduler.step()
            images += len(data)
            if args.max_steps and step + 1 >= args.max_steps:
                break
        rate = images / (time.perf_counter() - started)
        if scheduler:
            scheduler.step()
        model.eval()
        correct = torch.zeros(2)
        with torch.no_grad():
            for data, target in test_loader:  # every rank evaluates the whole test set, as the example does
                correct[0] += (model(data).argmax(1) == target).sum()
                correct[1] += len(target)
        if rank == 0:
            print(f"epoch {epoch} test accuracy={correct[0].item() / correct[1].item():.4f} images/s={rate:.1f}",
                  flush=True)
    process_group.destroy_process_group()


if __name__ == "__main__":
    main()
