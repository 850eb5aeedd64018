"""Your own model in gpuprof's training probes (ddp, sharded, and the ci suite):

    gpuprof run ddp --gpus 2 --model examples.own_model.mlp:build
    gpuprof sweep --suite ci --model examples.own_model.mlp:build
    gpuprof run pipeline --gpus 2 --model examples.own_model.mlp:build_sequential

`build()` returns the model and a function that makes one micro-batch on a device. The module
is imported on every rank from the working folder or PYTHONPATH, and `build()` is called with
the same seed on every rank. The model here is a small residual MLP classifier whose forward
returns its loss (gpuprof uses a model's output as the loss when it is one number)."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

WIDTH, DEPTH, CLASSES, BATCH = 512, 4, 100, 32


class Residual(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.fc2(F.gelu(self.fc1(self.norm(x))))
        return out


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Residual(WIDTH) for _ in range(DEPTH)))
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(self.blocks(x)), labels)


def build() -> tuple[nn.Module, object]:
    """The model, and make_batch(device) -> (inputs, labels) of BATCH samples."""

    def make_batch(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(BATCH, WIDTH, device=device)
        labels = torch.randint(0, CLASSES, (BATCH,), device=device)
        return x, labels

    return Classifier(), make_batch


def build_sequential() -> tuple[nn.Module, object]:
    """The same blocks as an nn.Sequential, for the pipeline probe (split into stages evenly
    by parameters): make_batch(device) -> one tensor of BATCH samples."""

    def make_batch(device: torch.device) -> torch.Tensor:
        return torch.randn(BATCH, WIDTH, device=device)

    blocks = [Residual(WIDTH) for _ in range(DEPTH)]
    return nn.Sequential(*blocks, nn.Linear(WIDTH, CLASSES)), make_batch
