"""The model zoo on the GPU: fidelity, exact op links and agreement with the reference method.

Each model runs through ``benchmarks.compare_reference.compare_model`` (small sizes): our
profile() against an uninstrumented CUPTI capture and a bare torch.profiler capture (kernel-name
multisets must be equal), against torch.profiler's op links (our op is the same op or its
dispatcher-level ancestor, for every kernel) and against the record_function baseline that
attributes the way AITune does ((module, function, kernel) multisets agree wherever it attributes).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.kineto]  # a bare torch.profiler capture per model

ZOO = ["mlp", "resnet50", "mha_blocks", "sdpa_blocks", "vit_b_16", "gpt2"]


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_is_exact_and_faithful(name):
    from benchmarks.compare_reference import compare_model

    report = compare_model(name, "cuda", size="small")
    if report["status"] == "skipped":
        pytest.skip(report["reason"])
    assert report["status"] == "ok", report
    assert report["fidelity_cupti"].get("equal"), report["fidelity_cupti"]
    assert report["fidelity_torch_profiler"]["equal"], report["fidelity_torch_profiler"]
    assert report["op_links"]["ok"], report["op_links"]
    assert report["agreement"]["ok"], report["agreement"]
    assert report["ours_kernels"] > 0 and not report["warnings"]
