"""On the GPU, the native op tracer attributes every kernel exactly as the Python dispatch mode does.

Both tracers profile each zoo model (small sizes); the (module, function, op, kernel) multisets
must be equal, every kernel must carry an op or scope, and the kernel-name multiset must not
change. This is what makes the native tracer a safe default on CUDA.
"""

from __future__ import annotations

import collections

import pytest

from aitune_dispatch import encoded

pytestmark = pytest.mark.gpu

ZOO = ["mlp", "resnet50", "mha_blocks", "sdpa_blocks", "vit_b_16", "gpt2"]
UNDER_DISPATCH_MODE = {"aten::_reshape_alias": "aten::view"}  # see tests/test_native_tracer.py


def _profile(model, samples, tracer):
    from aitune_dispatch import ModuleFunctionKernelProfiler

    profiler = ModuleFunctionKernelProfiler(op_tracer=tracer)
    frame, _ = profiler.profile(model, samples, warmup_iterations=1)
    return profiler.last_result, frame


@pytest.mark.parametrize("name", ZOO)
def test_native_tracer_matches_the_dispatch_mode_on_cuda(name):
    from aitune_dispatch.tracing import native as native_ops
    from benchmarks import zoo

    assert native_ops.available(), "benchmarks/gpu_run.sh builds the native tracer"
    try:
        work = zoo.build(name, "cuda", 2, size="small")
    except zoo.ModelUnavailable as error:
        pytest.skip(str(error))
    python, python_frame = _profile(work.model, work.samples, "python")
    native, native_frame = _profile(work.model, work.samples, "native")
    assert native.metadata["tracer"] == "native"

    def rows(frame):
        frame = frame.assign(op=frame.op.replace(UNDER_DISPATCH_MODE))
        return collections.Counter(map(tuple, frame[["module_name", "function_name", "op", "kernel"]].values))

    assert len(native_frame) > 0
    assert rows(native_frame) == rows(python_frame)
    kernels = encoded.decoded(native.activity).to_pandas()
    assert kernels.kernel.notna().all()
    python_kernels = encoded.decoded(python.activity).to_pandas()
    assert collections.Counter(kernels.kernel) == collections.Counter(python_kernels.kernel)
    # every kernel launched inside an op carries that op: none fell back to a scope or nothing
    assert kernels.op_id.notna().sum() == python_kernels.op_id.notna().sum()
