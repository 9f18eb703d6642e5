"""The benchmark model zoo, built from code and configs (never downloaded), with repeated samples.

Every builder is ``(device, repeat=1, *, size="bench", **overrides) -> Workload(model, samples)``:
the model is in eval mode on ``device`` with seeded random weights, and ``samples`` is a list of
``(args, kwargs)`` pairs, the model's base samples repeated ``repeat`` times (the same tensors).
``size="small"`` is for tests and CPU smoke runs; ``"bench"`` is what the H200 harness uses.
torchvision, transformers and diffusers are imported lazily: a missing package raises
:class:`ModelUnavailable`, which the harness reports as a skipped model.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch.demo import AttentionBlock as SDPABlock  # the pre-norm SDPA block of the demo

Sample = tuple[tuple[Any, ...], dict[str, Any]]


class Workload(NamedTuple):
    """A model and the samples of one pass; or, where ``function`` is set, a pipeline function.

    A pipeline (``llama_generate``) is profiled as ``profile(function, module=model)``: one call of
    ``function`` is one pass, and ``samples`` is empty.
    """

    model: nn.Module
    samples: list[Sample]
    function: Callable[[], Any] | None = None

    def run(self) -> None:
        """One pass, as ``profile()`` runs it."""
        if self.function is not None:
            self.function()
            return
        for args, kwargs in self.samples:
            self.model(*args, **kwargs)


class ModelUnavailable(RuntimeError):
    """A zoo model whose package is not installed."""


Builder = Callable[..., Workload]
SEED = 0
BASE_SAMPLES = 2  # the AITune reference's published numbers use 2 samples per pass

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
    "efficientnet_b0": {"bench": {"batch": 8, "image": 224}, "small": {"batch": 1, "image": 32}},
    "llama_generate": {
        "bench": {"hidden": 2048, "intermediate": 5632, "layers": 8, "heads": 16, "kv_heads": 4, "vocab": 32000,
                  "prompt": 32, "new_tokens": 64, "dtype": torch.bfloat16},
        "small": {"hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 256,
                  "prompt": 4, "new_tokens": 3, "dtype": torch.float32},
    },
    "unet_sd15": {
        "bench": {"batch": 2, "latent": 64, "text": 77, "channels": (320, 640, 1280, 1280), "layers": 2,
                  "cross": 768, "heads": 8, "dtype": torch.float16},
        "small": {"batch": 1, "latent": 8, "text": 4, "channels": (32, 64), "layers": 1, "cross": 32, "heads": 2,
                  "norm_groups": 8, "dtype": torch.float32},
    },
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
    """The "8 x SDPA transformer block" workload of the AITune reference's published numbers (depth 8 at bench size)."""
    return _block_stack(SDPABlock, "sdpa_blocks", device, repeat, size, overrides)


class Graphed(nn.Module):
    """Captures ``inner`` into a CUDA graph on its first call and replays it on every call."""

    def __init__(self, inner: nn.Module, example: torch.Tensor) -> None:
        super().__init__()
        self.inner = inner
        self.static_in = example.clone()
        self.static_out: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm up outside the capture, as torch.cuda.graph asks
                for _ in range(2):
                    self.inner(self.static_in)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = self.inner(self.static_in)
        self.static_in.copy_(x)
        self.graph.replay()
        assert self.static_out is not None
        return self.static_out.clone()


# -- models from optional packages ------------------------------------------------------------------
def _torchvision_models() -> Any:
    """``torchvision.models``, or ModelUnavailable."""
    try:
        import torchvision.models as models
    except ImportError as error:
        raise ModelUnavailable(f"torchvision is not installed ({error}); pip install torchvision") from error
    return models


def _torchvision_model(name: str, device: str, repeat: int, size: str, overrides: Any, **build: Any) -> Workload:
    """torchvision ``models.<name>(weights=None, **build)`` on ``BASE_SAMPLES`` random image batches."""
    p = _params(name, size, overrides)
    models = _torchvision_models()
    with _seeded() as generator:
        model = getattr(models, name)(weights=None, **{k: p[v] for k, v in build.items()})
        inputs = _images(generator, p["batch"], p["image"])
    return _finish(model, inputs, device, repeat)


def resnet50(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """torchvision ``resnet50(weights=None)`` (a conv net: cuDNN convolutions, batch norm, pooling)."""
    return _torchvision_model("resnet50", device, repeat, size, overrides)


def vit_b_16(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """torchvision ``vit_b_16(weights=None)`` (its encoder uses ``nn.MultiheadAttention``)."""
    return _torchvision_model("vit_b_16", device, repeat, size, overrides, image_size="image")


def efficientnet_b0(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """torchvision ``efficientnet_b0(weights=None)``: a conv net of many small kernels (depthwise convolutions,
    squeeze-and-excitation, SiLU), where the per-launch cost of a profiler shows."""
    return _torchvision_model("efficientnet_b0", device, repeat, size, overrides)


def gpt2(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """HF ``GPT2LMHeadModel`` from a ``GPT2Config`` (default GPT-2 small at bench size), no KV cache."""
    p = _params("gpt2", size, overrides)
    transformers = _transformers()
    config = transformers.GPT2Config(**{"use_cache": False, **p["config"]})
    with _seeded() as generator:
        model = transformers.GPT2LMHeadModel(config)
        inputs = [
            ((), {"input_ids": torch.randint(0, config.vocab_size, (p["batch"], p["seq"]), generator=generator)})
            for _ in range(BASE_SAMPLES)
        ]
    return _finish(model, inputs, device, repeat)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as error:
        raise ModelUnavailable(f"transformers is not installed ({error}); pip install transformers") from error
    return transformers


def llama_generate(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """``LlamaForCausalLM`` from a ``LlamaConfig`` (8 layers, GQA 16/4 heads, bf16 at bench size), as a pipeline:
    ``repeat`` greedy ``generate()`` calls of exactly ``new_tokens`` tokens after a ``prompt``-token prompt."""
    p = _params("llama_generate", size, overrides)
    transformers = _transformers()
    config = transformers.LlamaConfig(
        hidden_size=p["hidden"],
        intermediate_size=p["intermediate"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        num_key_value_heads=p["kv_heads"],
        vocab_size=p["vocab"],
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    with _seeded() as generator:
        model = transformers.LlamaForCausalLM(config).to(dtype=p["dtype"])
        ids = torch.randint(3, p["vocab"], (1, p["prompt"]), generator=generator)
    model = model.eval().to(device)
    ids = ids.to(device)
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1; got {repeat}")
    new = p["new_tokens"]

    def generate() -> None:
        for _ in range(repeat):
            model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)

    return Workload(model, [], generate)


def unet_sd15(device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """diffusers ``UNet2DConditionModel`` with the SD-1.5 configuration (fp16, batch 2, 64x64 latents,
    77x768 text states at bench size)."""
    p = _params("unet_sd15", size, overrides)
    try:
        from diffusers import UNet2DConditionModel
    except ImportError as error:
        raise ModelUnavailable(f"diffusers is not installed ({error}); pip install diffusers") from error
    levels = len(p["channels"])
    with _seeded() as generator:
        model = UNet2DConditionModel(
            sample_size=p["latent"],
            in_channels=4,
            out_channels=4,
            down_block_types=("CrossAttnDownBlock2D",) * (levels - 1) + ("DownBlock2D",),
            up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (levels - 1),
            block_out_channels=p["channels"],
            layers_per_block=p["layers"],
            cross_attention_dim=p["cross"],
            attention_head_dim=p["heads"],
            norm_num_groups=p.get("norm_groups", 32),
        ).to(dtype=p["dtype"])
        inputs = [
            (
                (),
                {
                    "sample": torch.randn(p["batch"], 4, p["latent"], p["latent"], generator=generator).to(p["dtype"]),
                    "timestep": torch.tensor(500 - 100 * i),
                    "encoder_hidden_states": torch.randn(p["batch"], p["text"], p["cross"], generator=generator).to(
                        p["dtype"]
                    ),
                },
            )
            for i in range(BASE_SAMPLES)
        ]
    return _finish(model, inputs, device, repeat)


ZOO: dict[str, Builder] = {
    "mlp": mlp,
    "resnet50": resnet50,
    "mha_blocks": mha_blocks,
    "sdpa_blocks": sdpa_blocks,
    "vit_b_16": vit_b_16,
    "efficientnet_b0": efficientnet_b0,
    "gpt2": gpt2,
    "llama_generate": llama_generate,
    "unet_sd15": unet_sd15,
}


def build(name: str, device: str, repeat: int = 1, *, size: str = "bench", **overrides: Any) -> Workload:
    """Build zoo model ``name``; raises ModelUnavailable when its package is missing."""
    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}; choose from {sorted(ZOO)}")
    return ZOO[name](device, repeat, size=size, **overrides)


def measure_each(
    names: Sequence[str],
    measure: Callable[[str], dict[str, Any]],
    render: Callable[[list[dict[str, Any]]], str],
    out: Path,
    stem: str,
    progress: Callable[[list[dict[str, Any]]], str] | None = None,
) -> list[dict[str, Any]]:
    """``measure(name)`` of every model in turn, a model whose package is missing kept as skipped.

    After every model, ``progress(results)`` is printed (when given), the model's memory released, and
    ``<stem>.json`` and ``<stem>.md`` (``render(results)``) written under ``out``, so that a run cut short
    by its time limit keeps what it measured; ``render(results)`` is printed at the end.

    Returns
    -------
    list of dict
        One result per name, ``{"model", "status": "skipped", "reason"}`` for a skipped one.
    """
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for name in names:
        try:
            results.append(measure(name))
        except ModelUnavailable as error:
            results.append({"model": name, "status": "skipped", "reason": str(error)})
        if progress is not None:
            print(progress(results), flush=True)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        (out / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str))
        (out / f"{stem}.md").write_text(render(results))
    print(render(results))
    return results


def repeated(workload: Workload, repeat: int) -> Workload:
    """The same model with its base samples (a ``repeat=1`` workload) repeated ``repeat`` times."""
    if workload.function is not None:
        raise ValueError("a pipeline workload repeats itself: build it with repeat=N")
    return Workload(workload.model, list(workload.samples) * repeat)
