"""An MoE layer calling ``F.grouped_mm`` on the GPU: the function-object hooks give the reference's rows.

``F.grouped_mm`` has no ``has_torch_function`` gate, so no TorchFunctionMode sees it: on the mode path its
kernels fall outside every functional call (Mixtral-style experts lose their rows). The reference patches
``torch.nn.functional`` and so names them; the function-object hooks see the call at the function object.
Run on the GPU machine (``benchmarks/gpu_run.sh tests``); skipped without CUDA, without the hooks
(CPython < 3.12) or where this GPU has no grouped GEMM.
"""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from fixture_models import needs_native
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, schema
from aitune_dispatch.tracing import native

UNSUPPORTED = native.hooks_unsupported() if native.available() else "the native tracer is not built"
pytestmark = [
    pytest.mark.gpu,
    needs_native,
    pytest.mark.skipif(UNSUPPORTED is not None, reason=f"function-object hooks: {UNSUPPORTED}"),
    pytest.mark.skipif(not hasattr(F, "grouped_mm"), reason="this torch has no F.grouped_mm"),
]

EXPERTS, HIDDEN, FFN, TOKENS, TOP_K = 4, 64, 128, 32, 2
COLUMNS = ["module_name", "function_name", "op", "kernel"]


class Experts(nn.Module):
    """The experts of one MoE layer as two grouped GEMMs over tokens sorted by expert (transformers' layout)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate_up = nn.Parameter(torch.randn(EXPERTS, HIDDEN, 2 * FFN) / HIDDEN**0.5)
        self.down = nn.Parameter(torch.randn(EXPERTS, FFN, HIDDEN) / FFN**0.5)

    def forward(self, tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        gate, up = F.grouped_mm(tokens, self.gate_up, offs=offsets).chunk(2, dim=-1)
        return F.grouped_mm(F.silu(gate) * up, self.down, offs=offsets)


class MoE(nn.Module):
    """Router (linear, softmax, top-k), tokens sorted by expert, experts, weighted scatter back."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = Experts()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = F.softmax(self.router(x), dim=-1).topk(TOP_K, dim=-1)
        flat = chosen.flatten()
        order = flat.argsort()
        offsets = torch.bincount(flat, minlength=EXPERTS).cumsum(0).to(torch.int32)
        out = self.experts(x.repeat_interleave(TOP_K, dim=0)[order], offsets)
        unsorted = torch.empty_like(out).index_copy_(0, order, out)
        return (unsorted.view(-1, TOP_K, HIDDEN) * weights.unsqueeze(-1)).sum(1)


@pytest.fixture(scope="module")
def moe() -> tuple[nn.Module, list]:
    torch.manual_seed(0)
    model = nn.Sequential(MoE(), MoE()).cuda().bfloat16().eval()
    samples = [((torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16),), {}) for _ in range(2)]
    try:
        with torch.no_grad():
            model(*samples[0][0])
        torch.cuda.synchronize()
    except RuntimeError as error:  # grouped GEMM needs sm90+ in this torch
        pytest.skip(f"F.grouped_mm does not run on this GPU: {error}")
    return model, samples


def rows(frame, columns: list[str] = COLUMNS) -> collections.Counter:
    """The multiset of ``columns`` over the frame's rows (no function: "")."""
    return collections.Counter(map(tuple, frame[columns].fillna("").astype(str).values.tolist()))


@pytest.mark.kineto  # the reference runs torch.profiler, whose Kineto then keeps CUPTI's callback subscription
def test_an_moe_layers_grouped_mm_rows_match_the_reference(moe) -> None:
    from benchmarks.compare_reference import agreement
    from benchmarks.reference_baseline import ReferenceBaseline

    model, samples = moe
    with torch.no_grad():
        profiler = ModuleFunctionKernelProfiler(device="cuda")
        ours, data = profiler.profile(model, samples, warmup_iterations=1)
        theirs, their_data = ReferenceBaseline(device="cuda").profile(model, samples, warmup_iterations=1)
    assert profiler.last_result.metadata[schema.META_INTERCEPTION] == "objects"
    grouped = ours[ours["function_name"] == "grouped_mm"]
    # two grouped GEMMs per layer, two layers, both inside each layer's experts
    assert set(grouped["module_name"]) == {"0.experts", "1.experts"}
    assert set(grouped["op"]) == {"aten::_grouped_mm"}
    report = agreement(ours, theirs)
    assert report.ok, report.to_dict()
    assert rows(ours[ours["function_name"] == "grouped_mm"]) == rows(theirs[theirs["function_name"] == "grouped_mm"])
    # the distinct inputs: two shapes per layer's experts (gate_up and down), the same in both
    assert len(data["grouped_mm"]) == len(their_data["grouped_mm"]) == 2
    assert sorted(count for count, _ in data["grouped_mm"]) == sorted(count for count, _ in their_data["grouped_mm"])


def test_the_mode_misses_what_the_hooks_see_and_nothing_else_changes(moe) -> None:
    model, samples = moe
    with torch.no_grad():
        objects = ModuleFunctionKernelProfiler(device="cuda").profile_result(model, samples, warmup_iterations=1)
        mode = ModuleFunctionKernelProfiler(device="cuda", interception="mode").profile_result(
            model, samples, warmup_iterations=1
        )
    by_objects, by_mode = objects.to_pandas(), mode.to_pandas()
    # the same kernels ran (profiling changes nothing), under the same modules and ops
    where = ["module_name", "op", "kernel"]
    assert rows(by_objects, where) == rows(by_mode, where)
    assert "grouped_mm" not in set(mode.profiling_df()["function_name"])
    # every difference is a grouped GEMM kernel: named by the hooks, outside any functional for the mode
    only_objects, only_mode = rows(by_objects) - rows(by_mode), rows(by_mode) - rows(by_objects)
    assert only_objects and {function for _, function, _, _ in only_objects} == {"grouped_mm"}
    assert {op for _, _, op, _ in only_mode} == {"aten::_grouped_mm"}
    assert "grouped_mm" not in {function for _, function, _, _ in only_mode}
