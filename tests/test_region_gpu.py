"""``recording()`` on the GPU: a region's rows equal ``profile()``'s, its kernels a bare capture's, and a
training step's kernels are all kept, its backward kernels (launched on autograd's device thread) linked
to the forward's modules and calls and the fused optimizer's to its step (the share of time attributed is
reported by ``benchmarks/train_attribution.py``, not asserted). Run on the GPU machine
(``benchmarks/gpu_run.sh all_tests``); skipped without CUDA."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from conftest import bare_kernels
from fixture_models import cuda_mlp, cuda_quickstart, cuda_sdpa_demo
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler

pytestmark = pytest.mark.gpu
WORKLOADS = {"quickstart": cuda_quickstart, "sdpa_demo": cuda_sdpa_demo, "mlp": cuda_mlp}
ROW = ["module_name", "function_name", "op", "kernel"]


def _rows(result) -> list[tuple]:  # noqa: ANN001
    return [tuple(map(str, row)) for row in result.profiling_df()[ROW].to_numpy().tolist()]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_a_regions_rows_and_kernels_are_profiles_and_a_bare_captures(name):
    model, samples = WORKLOADS[name]()
    profiler = ModuleFunctionKernelProfiler()
    profiler.profile(model, samples, warmup_iterations=1)
    expected = profiler.last_result
    with aitune_dispatch.recording(model) as rec, torch.no_grad():
        for args, kwargs in samples:
            model(*args, **kwargs)
    assert len(_rows(rec.result)) > 0
    assert _rows(rec.result) == _rows(expected)
    kernels = collections.Counter(rec.result.activity.column("kernel").to_pylist())
    assert kernels == bare_kernels(model, samples)


def test_a_training_step_on_the_gpu_keeps_every_kernel_and_attributes_its_forward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(64, 256, device="cuda")

    def step() -> None:
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with aitune_dispatch.recording(model, wait=1, active=3) as rec:
        for _ in range(5):
            step()
            rec.step()
    result = rec.result
    frame = result.profiling_df()
    assert {("0", "linear"), ("1", "gelu"), ("2", "linear")} <= set(zip(frame["module_name"], frame["function_name"]))
    steps = result.steps().set_index("kernel")
    assert len(steps) > 0 and set(steps["steps"]) <= {1, 2, 3} and steps["steps"].max() == 3
    assert result.dropped_records == 0


def _kernels_of_steps(step, steps: int) -> collections.Counter:  # noqa: ANN001
    from aitune_dispatch.collection import make_cuda_source

    source = make_cuda_source()
    torch.cuda.synchronize()
    source.start()
    try:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    finally:
        source.stop()
    return collections.Counter(source.activity().kernels.column("name").to_pylist())


def test_a_training_steps_backward_and_fused_optimizer_kernels_are_linked(op_tracer):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    x, target = torch.randn(64, 256, device="cuda"), torch.zeros(64, 256, device="cuda")

    def step() -> None:
        F.mse_loss(model(x), target).backward()
        optimizer.step()
        optimizer.zero_grad()

    for _ in range(2):
        step()
    with aitune_dispatch.recording(model, op_tracer=op_tracer) as rec:
        for _ in range(2):
            step()
            rec.step()
    activity = rec.result.activity.to_pandas()
    backward = activity[activity["attribution"] == "backward"]
    assert len(backward) > 0
    # the weight and input gradients of both linears go to those linears, gelu's to the gelu call
    inside = backward[backward["module_id"] >= 0]
    linked = set(zip(inside["module_name"].astype(str), inside["function_name"].astype(str)))
    assert {("0", "linear"), ("1", "gelu"), ("2", "linear")} <= linked
    assert (backward["function_name"].astype(str) == "mse_loss").any()  # the loss's, outside the model
    assert (backward["op"].astype(str) == "aten::gelu_backward").any()
    # the fused AdamW kernel: the optimizer's step, with no module
    optimizer_rows = activity[activity["attribution"] == "optimizer"]
    assert set(optimizer_rows["function_name"].astype(str)) == {"AdamW.step"}
    assert (optimizer_rows["op"].astype(str) == "aten::_fused_adamw_").any()
    assert optimizer_rows["module_id"].eq(-1).all()
    # linking changes the rows, not what ran: the kernels of two steps are a bare capture's of two steps
    assert collections.Counter(activity["kernel"].astype(str)) == _kernels_of_steps(step, 2)
