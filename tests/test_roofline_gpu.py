"""On the GPU: a large bf16 matmul sits near the compute roof and a large elementwise op near the
memory roof, by the roofline view's own arithmetic (issue 24). Bands, not times: the fractions of the
datasheet bounds a healthy GPU reaches. Run by ``benchmarks/gpu_run.sh``; skipped without CUDA.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.results.limits import limits_for

pytestmark = pytest.mark.gpu


class _Matmul(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w)


class _Elementwise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)


def _row(model: nn.Module, sample: tuple, function: str):
    profiler = ModuleFunctionKernelProfiler()
    result = profiler.profile_result(model, [(sample, {})] * 5, warmup_iterations=2)
    if limits_for(result.metadata.get("gpu_name")) is None:
        pytest.skip(f"no limits known for {result.metadata.get('gpu_name')!r}")
    rows = result.samples(roofline=True)
    (row,) = rows[rows["function_name"] == function].itertuples()
    return row, result


def test_a_large_bf16_matmul_is_compute_bound_near_the_peak():
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    row, result = _row(_Matmul().cuda(), (x, w), "linear")
    assert row.flops == 5 * 2 * n**3  # five calls of 2 n^3
    assert row.bound == "compute"
    print(f"matmul: {row.flop_per_s / 1e12:.0f} TFLOP/s, {row.fraction_of_bound:.3f} of the bf16 peak")
    assert 0.5 < row.fraction_of_bound < 1.05, row


def test_a_large_elementwise_op_is_memory_bound_near_the_bandwidth():
    x = torch.randn(2**28, device="cuda", dtype=torch.bfloat16)  # 512 MiB read, 512 MiB written
    row, _ = _row(_Elementwise().cuda(), (x,), "relu")
    assert row.min_bytes == 5 * 2 * 2**28 * 2
    print(f"relu: {row.bytes_per_s / 1e12:.2f} TB/s, {row.fraction_of_bound:.3f} of the bandwidth")
    assert 0.5 < row.fraction_of_bound < 1.05, row
