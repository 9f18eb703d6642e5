"""A small built-in model that exercises the common functional calls, built from code."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class AttentionBlock(nn.Module):
    """Pre-norm transformer block: layer_norm, linear, scaled_dot_product_attention, gelu."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, tokens, dim)
        x = x + self.proj(attended)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class DemoModel(nn.Module):
    """Conv stem, patch tokens, attention blocks, classifier head."""

    def __init__(self, dim: int = 64, heads: int = 4, depth: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 4, stride=4), nn.GroupNorm(8, dim), nn.SiLU())
        self.blocks = nn.ModuleList(AttentionBlock(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images).flatten(2).transpose(1, 2)
        for block in self.blocks:
            x = block(x)
        return F.softmax(self.head(x.mean(dim=1)), dim=-1)


def demo_workload(device: str) -> tuple[nn.Module, list[tuple[tuple[Any, ...], dict[str, Any]]]]:
    """The demo model on ``device`` with two samples of different batch sizes."""
    generator = torch.Generator().manual_seed(0)
    model = DemoModel().eval().to(device)
    samples = [((torch.randn(batch, 3, 32, 32, generator=generator).to(device),), {}) for batch in (4, 8)]
    return model, samples
