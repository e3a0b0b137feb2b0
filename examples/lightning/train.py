"""A PyTorch Lightning script that runs unchanged under the Job's torchrun line.

Lightning sees torchrun's environment (TorchElasticEnvironment): the processes, ranks and the rendezvous are
torchrun's, so the Trainer is only told how many there are. Run alone or under torchrun:

    python train.py --max-epochs 2
    torchrun --standalone --nproc-per-node=2 train.py --max-epochs 2 --output-dir out
"""

import argparse
import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self, learning_rate: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(16, 1)

    def training_step(self, batch, batch_index):
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self.layer(inputs), targets)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)


def dataset(size: int = 4096) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.rand(size, 16, generator=generator)
    weights = torch.arange(16, dtype=torch.float32) / 16
    return TensorDataset(inputs, inputs @ weights[:, None] + 0.01 * torch.randn(size, 1, generator=generator))


def main() -> None:
    parser = argparse.ArgumentParser(description="Lightning DDP regression on random data")
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "lightning-out"))
    args = parser.parse_args()
    final = os.path.join(args.output_dir, "final.ckpt")
    if os.path.exists(final):
        # a rerun of a finished job (the checkpoint outlives it on the shared volume): nothing to redo
        print(f"rank {os.environ.get('RANK', '0')}: already trained: {final} exists; nothing to do (delete it to "
              "train anew)", flush=True)
        return
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    trainer = L.Trainer(
        accelerator="gpu" if torch.cuda.is_available() else "cpu",
        devices=processes,
        num_nodes=int(os.environ.get("WORLD_SIZE", "1")) // processes,
        strategy="ddp",
        max_epochs=args.max_epochs,
        default_root_dir=args.output_dir,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
    )
    model = Regression()
    trainer.fit(model, DataLoader(dataset(), batch_size=64, shuffle=True))
    loss = float(trainer.callback_metrics["train_loss"])
    print(f"rank {trainer.global_rank} of {trainer.world_size}: {trainer.current_epoch} epochs, train_loss {loss:.4f}",
          flush=True)
    # every rank calls it (Lightning writes on rank 0 and holds the others in a barrier until it is written),
    # so no pod leaves before the checkpoint is on the volume
    trainer.save_checkpoint(final)


if __name__ == "__main__":
    main()
