"""Replay benchmarks on the GPU: the zoo's samples replay the kernels the model ran.

``benchmarks/replay_ratios.py`` prints the replayed / recorded per-call time ratios these tests
leave out (no test asserts a time).
"""

from __future__ import annotations

import pyarrow.compute as pc
import pytest
import torch
import torch.nn.functional as F

from aitune_dispatch import ModuleFunctionKernelProfiler, activate, benchmark, load

pytestmark = pytest.mark.gpu

ZOO = ["mlp", "resnet50", "mha_blocks", "sdpa_blocks", "vit_b_16", "gpt2"]
FUNCTIONS = ("linear", "conv2d", "scaled_dot_product_attention", "layer_norm")


def _zoo_result(name: str):
    from benchmarks.zoo import ModelUnavailable, build

    try:
        workload = build(name, "cuda", size="small")
    except ModelUnavailable as error:
        pytest.skip(str(error))
    profiler = ModuleFunctionKernelProfiler()
    return profiler.profile_result(workload.model, workload.samples, warmup_iterations=2)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_samples_replay_the_recorded_kernels(name):
    result = _zoo_result(name)
    functions = [f for f in FUNCTIONS if f in result.function_data]
    assert functions, sorted(result.function_data)
    table = benchmark(result, functions, repeats=5, warmup=2)
    failed = table[~table["ok"] | ~table["kernels_match"].fillna(False).astype(bool)]
    assert failed.empty, failed.to_string()
    assert (table["us_per_call"] > 0).all() and (table["recorded_us_per_call"] > 0).all()


def test_a_cold_cache_replay_on_cuda_times_the_recorded_kernels_only():
    result = _zoo_result("sdpa_blocks")
    table = benchmark(result, ["linear", "layer_norm"], repeats=5, warmup=2, cache="cold")
    # the L2 flush before each timed call launches a fill kernel of its own, attributed to flush.i
    assert table["ok"].all() and table["kernels_match"].all(), table.to_string()
    assert (table["us_per_call"] > 0).all()


def test_a_cuda_result_saved_without_tensors_replays_from_metadata(tmp_path):
    result = _zoo_result("sdpa_blocks")
    loaded = load(result.save(tmp_path / "sdpa"))
    table = benchmark(loaded, ["linear", "scaled_dot_product_attention", "layer_norm"], repeats=3, warmup=1)
    assert table["ok"].all() and table["kernels_match"].all(), table.to_string()


def test_a_compiled_candidate_is_timed_on_cuda_and_activated_under_the_profiler():
    result = _zoo_result("sdpa_blocks")
    compiled_gelu = torch.compile(F.gelu)
    table = benchmark(result, ["gelu"], candidates={"gelu": {"compiled": compiled_gelu}}, repeats=5, warmup=3)
    candidate = table[table["implementation"] == "compiled"]
    # CUPTI sees the Triton kernels the CPU source cannot: timed, validated
    assert candidate["ok"].all() and (candidate["us_per_call"] > 0).all(), table.to_string()
    from benchmarks.zoo import build

    workload = build("sdpa_blocks", "cuda", size="small")
    # min_speedup=None: every validated sample, whichever is faster on this GPU (routing is what is tested)
    with activate({"gelu": {"compiled": compiled_gelu}}, only=table, min_speedup=None) as activation:
        routed = ModuleFunctionKernelProfiler().profile_result(workload.model, workload.samples, warmup_iterations=2)
    calls = sum(count for count, _ in result.function_data["gelu"])
    assert activation.routed["gelu"] == 3 * calls  # two warm-up passes and the recorded one
    # the gelu calls ran ATen's GeluCUDAKernelImpl before, the candidate's Triton kernel now, in the same calls
    assert any("Gelu" in k for k in _gelu_kernels(result)), _gelu_kernels(result)
    names = _gelu_kernels(routed)
    assert any(k.startswith("triton") for k in names) and not any("Gelu" in k for k in names), names


def _gelu_kernels(result) -> list[str]:
    return result.activity.filter(pc.equal(result.activity["function_name"], "gelu"))["kernel"].to_pylist()
