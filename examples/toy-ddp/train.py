"""A multinode DDP trainer in the style of the PyTorch tutorial's multinode.py, as a user brings it: random data, a linear model, DDP, and a snapshot on
the shared volume that a restarted gang resumes from. Nothing in it knows about indexed-trainer.

    torchrun --standalone --nproc-per-node=2 train.py 50 5 --batch_size 32 --snapshot_path snapshot.pt
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    """Random (input, target) pairs, the same on every rank (seeded)."""

    def __init__(self, size):
        generator = torch.Generator().manual_seed(0)
        self.data = [(torch.rand(20, generator=generator), torch.rand(1, generator=generator)) for _ in range(size)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


def ddp_setup():
    # Imported before the group exists: torch.optim imports it lazily otherwise, and it then holds the default
    # group for good, so destroy_process_group cannot free it and gloo's threads may abort the interpreter's
    # exit (SIGABRT: a finished rank's pod fails). The same workaround as trainer_runtime/process_group.py.
    import torch.distributed.nn  # noqa: F401

    init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.device = torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")
        self.model = model.to(self.device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            print("Loading snapshot", flush=True)
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model, device_ids=[self.local_rank] if torch.cuda.is_available() else None)

    def _load_snapshot(self, snapshot_path):
        snapshot = torch.load(snapshot_path, map_location=self.device, weights_only=True)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}", flush=True)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[RANK{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}", flush=True)
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            loss = self._run_batch(source.to(self.device), targets.to(self.device))
        return loss

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "OPTIMIZER_STATE": self.optimizer.state_dict(),
                    "EPOCHS_RUN": epoch}
        os.makedirs(os.path.dirname(self.snapshot_path) or ".", exist_ok=True)
        temporary = f"{self.snapshot_path}.tmp"  # a pod killed mid-save leaves the previous snapshot whole
        torch.save(snapshot, temporary)
        os.replace(temporary, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}", flush=True)

    def train(self, max_epochs):
        if self.epochs_run >= max_epochs:
            # a rerun of a finished job (the snapshot outlives it on the shared volume): nothing to redo
            print(f"[RANK{self.global_rank}] already trained: the snapshot {self.snapshot_path} holds "
                  f"{self.epochs_run} of {max_epochs} epochs; nothing to do (delete it to train anew)", flush=True)
            return
        for epoch in range(self.epochs_run, max_epochs):
            loss = self._run_epoch(epoch)
            if self.global_rank == 0 and (epoch + 1) % self.save_every == 0:
                self._save_snapshot(epoch + 1)
        print(f"[RANK{self.global_rank}] done: {max_epochs} epochs, last loss {loss:.4f}", flush=True)


def main(save_every, total_epochs, batch_size, snapshot_path):
    ddp_setup()
    dataset = MyTrainDataset(2048)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    train_data = DataLoader(dataset, batch_size=batch_size, pin_memory=torch.cuda.is_available(), shuffle=False,
                            sampler=DistributedSampler(dataset))
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path)
    trainer.train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int, help="Input batch size on each device (default: 32)")
    parser.add_argument("--snapshot_path", default="snapshot.pt", help="Where the snapshot is saved and resumed from")
    args = parser.parse_args()
    main(args.save_every, args.total_epochs, args.batch_size, args.snapshot_path)
