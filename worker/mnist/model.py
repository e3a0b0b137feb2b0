"""The CNN: two 5x5 convolutions with max-pooling, then 1024 -> 128 -> 10.

This is the classic LeNet-style MNIST network (as in the TensorFlow "Deep MNIST" tutorial and Caffe's
LeNet example, both reported above 99.2% on full MNIST). It costs about 3.9 M multiply-adds per image,
a third of pytorch/examples' MNIST network (about 12 M, its second 3x3 convolution runs at 24x24), which
is what makes it fast on CPU.
"""

from __future__ import annotations

import torch
from torch import nn


class MnistCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=5),  # 28 -> 24
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),  # 24 -> 12
            nn.Conv2d(32, 64, kernel_size=5),  # 12 -> 8
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),  # 8 -> 4
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 4 * 4, 128),
            nn.ReLU(inplace=True),
            nn.Linear(128, 10),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# Multiply-adds of one forward pass of one image (conv1, conv2, fc1, fc2); a training step costs about 3x.
FORWARD_MACS = 24 * 24 * 32 * 25 + 8 * 8 * 64 * 32 * 25 + 1024 * 128 + 128 * 10
