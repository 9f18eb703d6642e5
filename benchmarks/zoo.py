"""The benchmark model zoo, built from code and configs (never downloaded), with repeated samples.

Every builder is ``(device, repeat=1, *, size="bench", **overrides) -> Workload(model, samples)``:
the model is in eval mode on ``device`` with seeded random weights, and ``samples`` is a list of
``(args, kwargs)`` pairs, the model's base samples repeated ``repeat`` times (the same tensors).
``size="small"`` is for tests and CPU smoke runs; ``"bench"`` is what the H200 harness uses.
torchvision and transformers are imported lazily: a missing package raises
:class:`ModelUnavailable`, which the harness reports as a skipped model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch.demo import AttentionBlock as SDPABlock  # the pre-norm SDPA block of the demo

Sample = tuple[tuple[Any, ...], dict[str, Any]]


class Workload(NamedTuple):
    """A model and the samples of one pass (``(model, samples)`` unpacks as a tuple)."""

    model: nn.Module
    samples: list[Sample]


class ModelUnavailable(RuntimeError):
    """A zoo model whose package is not installed."""


Builder = Callable[..., Workload]
SEED = 0
BASE_SAMPLES = 2  # the reference's published numbers use 2 samples per pass (DESIGN.md)

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "mlp": {"bench": {"batch": 32}, "small": {"batch": 4}},
    "resnet50": {"bench": {"batch": 8, "image": 224}, "small": {"batch": 1, "image": 64}},
    "mha_blocks": {
        "bench": {"depth": 8, "dim": 768, "heads": 12, "tokens": 197, "batch": 8},
        "small": {"depth": 2, "dim": 32, "heads": 2, "tokens": 8, "batch": 2},
    },
    "sdpa_blocks": {
        "bench": {"depth": 8, "dim": 768, "heads": 12, "tokens": 256, "batch": 8},
        "small": {"depth": 2, "dim": 32, "heads": 2, "tokens": 8, "batch": 2},
    },
    "vit_b_16": {"bench": {"batch": 8, "image": 224}, "small": {"batch": 1, "image": 32}},
    "gpt2": {
        "bench": {"batch": 4, "seq": 128, "config": {}},
        "small": {
            "batch": 2,
            "seq": 8,
            "config": {
                "n_layer": 2,
                "n_embd": 64,
                "n_head": 2,
                "n_positions": 64,
                "vocab_size": 512,
                "bos_token_id": 0,
                "eos_token_id": 0,
            },
        },
    },
}


def _params(name: str, size: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The size preset of ``name`` with ``overrides`` applied."""
    if size not in SIZES[name]:
        raise ValueError(f"size must be one of {sorted(SIZES[name])}; got {size!r}")
    return {**SIZES[name][size], **overrides}


@contextmanager
def _seeded() -> Iterator[torch.Generator]:
    """Seed weight initialisation without disturbing the caller's global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        yield torch.Generator().manual_seed(SEED)


def _finish(model: nn.Module, inputs: list[Sample], device: str, repeat: int) -> Workload:
    """Move model and inputs to ``device`` and repeat the base samples."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1; got {repeat}")
    model = model.eval().to(device)
    moved = [
        (tuple(a.to(device) for a in args), {k: v.to(device) for k, v in kwargs.items()}) for args, kwargs in inputs
    ]
    return Workload(model, moved * repeat)


def _images(generator: torch.Generator, batch: int, image: int) -> list[Sample]:
    """``BASE_SAMPLES`` random image batches."""
    return [((torch.randn(batch, 3, image, image, generator=generator),), {}) for _ in range(BASE_SAMPLES)]


def _tokens(generator: torch.Generator, batch: int, tokens: int, dim: int) -> list[Sample]:
    """``BASE_SAMPLES`` random token batches."""
    return [((torch.randn(batch, tokens, dim, generator=generator),), {}) for _ in range(BASE_SAMPLES)]


# -- models built from plain torch ------------------------------------------------------------------
def mlp(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """The spec's quick-start MLP: Linear(128, 256), ReLU, Linear(256, 64)."""
    p = _params("mlp", size, overrides)
    with _seeded() as generator:
        model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 64))
        inputs = [((torch.randn(p["batch"], 128, generator=generator),), {}) for _ in range(BASE_SAMPLES)]
    return _finish(model, inputs, device, repeat)


class MHABlock(nn.Module):
    """Pre-norm block on ``nn.MultiheadAttention`` (self-attention, batch_first: its eval fast path)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attention and MLP with residuals; q, k and v are the same tensor, as the fast path needs."""
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def _block_stack(block: type[nn.Module], name: str, device: str, repeat: int, size: str, overrides: Any) -> Workload:
    """``depth`` blocks in an ``nn.Sequential`` with token inputs."""
    p = _params(name, size, overrides)
    with _seeded() as generator:
        model = nn.Sequential(*(block(p["dim"], p["heads"]) for _ in range(p["depth"])))
        inputs = _tokens(generator, p["batch"], p["tokens"], p["dim"])
    return _finish(model, inputs, device, repeat)


def mha_blocks(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """A stack of :class:`MHABlock` (``nn.MultiheadAttention`` on its eval fast path)."""
    return _block_stack(MHABlock, "mha_blocks", device, repeat, size, overrides)


def sdpa_blocks(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """DESIGN.md's "8 x SDPA transformer block" workload (depth 8 at bench size)."""
    return _block_stack(SDPABlock, "sdpa_blocks", device, repeat, size, overrides)


# -- models from optional packages ------------------------------------------------------------------
def _torchvision_models() -> Any:
    """``torchvision.models``, or ModelUnavailable."""
    try:
        import torchvision.models as models
    except ImportError as error:
        raise ModelUnavailable(f"torchvision is not installed ({error}); pip install torchvision") from error
    return models


def resnet50(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """torchvision ``resnet50(weights=None)`` (a conv net: cuDNN convolutions, batch norm, pooling)."""
    p = _params("resnet50", size, overrides)
    models = _torchvision_models()
    with _seeded() as generator:
        model = models.resnet50(weights=None)
        inputs = _images(generator, p["batch"], p["image"])
    return _finish(model, inputs, device, repeat)


def vit_b_16(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """torchvision ``vit_b_16(weights=None)`` (its encoder uses ``nn.MultiheadAttention``)."""
    p = _params("vit_b_16", size, overrides)
    models = _torchvision_models()
    with _seeded() as generator:
        model = models.vit_b_16(weights=None, image_size=p["image"])
        inputs = _images(generator, p["batch"], p["image"])
    return _finish(model, inputs, device, repeat)


def gpt2(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """HF ``GPT2LMHeadModel`` from a ``GPT2Config`` (default GPT-2 small at bench size), no KV cache."""
    p = _params("gpt2", size, overrides)
    try:
        import transformers
    except ImportError as error:
        raise ModelUnavailable(f"transformers is not installed ({error}); pip install transformers") from error
    config = transformers.GPT2Config(**{"use_cache": False, **p["config"]})
    with _seeded() as generator:
        model = transformers.GPT2LMHeadModel(config)
        inputs = [
            ((), {"input_ids": torch.randint(0, config.vocab_size, (p["batch"], p["seq"]), generator=generator)})
            for _ in range(BASE_SAMPLES)
        ]
    return _finish(model, inputs, device, repeat)


ZOO: dict[str, Builder] = {
    "mlp": mlp,
    "resnet50": resnet50,
    "mha_blocks": mha_blocks,
    "sdpa_blocks": sdpa_blocks,
    "vit_b_16": vit_b_16,
    "gpt2": gpt2,
}


def build(name: str, device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """Build zoo model ``name``; raises ModelUnavailable when its package is missing."""
    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}; choose from {sorted(ZOO)}")
    return ZOO[name](device, repeat, size=size, **overrides)


def repeated(workload: Workload, repeat: int) -> Workload:
    """The same model with its base samples (a ``repeat=1`` workload) repeated ``repeat`` times."""
    return Workload(workload.model, list(workload.samples) * repeat)
