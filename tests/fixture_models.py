"""The small models several test files run, defined once (beside :mod:`fixture_results`).

:class:`Mixed` is fc (linear) -> norm (layer_norm) -> gelu -> relu, one call of each per forward;
:func:`mixed_inputs` / :func:`mixed_samples` are its three inputs of batch 2, 2 and 3 (two distinct
samples per function, the first one used twice); :func:`mixed_model` builds it under a fixed torch
seed and :func:`mixed_result` profiles that model on CPU (the ``mixed_result`` conftest fixture);
:func:`exact_relu` and :func:`erf_gelu` are candidates for its relu and gelu.
:func:`quickstart_model` is the spec's quickstart model; :func:`cuda_quickstart` and
:func:`cuda_sdpa_demo` are the GPU tests' workloads of it and of the demo model; :func:`cuda_mlp`
(Linear, GELU, Linear) is the compiled and graphed GPU tests' model and :func:`run_unprofiled` their
pass outside the profiler. :class:`StackSource` stands for the CUDA source in the graph tests that
run without a GPU. :data:`cupti_native` is the compiled CUPTI decoder (None where it did not build,
:data:`NATIVE_MISSING` says why) and :data:`needs_native` skips a test without it.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, schema
from aitune_dispatch.demo import DemoModel
from aitune_dispatch.results import ProfileResult

try:
    from aitune_dispatch.collection import _cupti_native as cupti_native
except ImportError as error:  # pragma: no cover - depends on the build
    cupti_native = None
    NATIVE_MISSING = f"aitune_dispatch.collection._cupti_native did not build ({error}); see native_shims/README.md"
else:
    NATIVE_MISSING = ""

needs_native = pytest.mark.skipif(cupti_native is None, reason=NATIVE_MISSING or "built")


class Mixed(nn.Module):
    """fc (linear) -> norm (layer_norm) -> gelu -> relu: one call of each per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.gelu(self.norm(self.fc(x))))


def mixed_inputs() -> list[torch.Tensor]:
    """Three inputs of batch 2, 2 and 3 (8 features) from a generator seeded 0: samples batch 2, batch 3."""
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(batch, 8, generator=generator) for batch in (2, 2, 3)]


def mixed_samples() -> list:
    """:func:`mixed_inputs` as ``(args, kwargs)`` samples for ``profile_result``."""
    return [((x,), {}) for x in mixed_inputs()]


def mixed_model(seed: int = 0) -> Mixed:
    """:class:`Mixed` in eval mode, its weights drawn after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return Mixed().eval()


def mixed_result() -> ProfileResult:
    """:func:`mixed_model` profiled on CPU over :func:`mixed_samples`, no warm-up pass."""
    model = mixed_model()
    return ModuleFunctionKernelProfiler(device="cpu").profile_result(model, mixed_samples(), warmup_iterations=0)


# -- the spec's quickstart and the demo, as the CPU and GPU tests run them ------------------------------
def quickstart_model() -> nn.Module:
    """The quickstart of the spec: Linear(128, 256) -> ReLU -> Linear(256, 64), in eval mode, on CPU."""
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 64)).eval()


def cuda_quickstart() -> tuple[nn.Module, list]:
    """:func:`quickstart_model` on the current CUDA device, with one sample of batch 32."""
    return quickstart_model().cuda(), [((torch.randn(32, 128, device="cuda"),), {})]


def cuda_sdpa_demo() -> tuple[nn.Module, list]:
    """The demo model (conv stem, attention blocks) on the current CUDA device, one sample of batch 4."""
    return DemoModel().eval().cuda(), [((torch.randn(4, 3, 32, 32, device="cuda"),), {})]


def cuda_mlp() -> tuple[nn.Module, list]:
    """Linear(128, 256), GELU, Linear(256, 64) in eval mode on CUDA, two seeded samples of batch 32."""
    generator = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 64)).eval().cuda()
    samples = [((torch.randn(32, 128, generator=generator).cuda(),), {}) for _ in range(2)]
    return model, samples


def run_unprofiled(function, samples) -> None:  # noqa: ANN001
    """One pass of ``function`` over ``samples`` under ``torch.no_grad()``, then a synchronize."""
    with torch.no_grad():
        for args, kwargs in samples:
            function(*args, **kwargs)
    torch.cuda.synchronize()


class StackSource:
    """A stand-in for the CUDA source: it keeps the pushed ids on a stack, as CUPTI does."""

    correlation_kind = 5

    def __init__(self) -> None:
        self.stack: list[int] = []

    def op_started(self, op_id: int, op: str) -> None:
        self.stack.append(op_id)

    def op_finished(self, op_id: int) -> None:
        self.stack.pop()

    def scope_entered(self, context_id: int) -> None:
        self.stack.append(schema.SCOPE_BASE + context_id)

    def scope_exited(self) -> None:
        self.stack.pop()

    def correlation_functions(self) -> None:
        return None  # no C push functions: the tracer pushes through the methods above


# -- candidates for Mixed's functions (named in benchmark tables by their __qualname__) -----------------
def exact_relu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """relu as ``clamp_min``: the same values as relu, bit for bit, from another kernel."""
    return torch.clamp_min(x, 0.0)


def erf_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu written out with ``erf``: other kernels than ``aten::gelu``."""
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
