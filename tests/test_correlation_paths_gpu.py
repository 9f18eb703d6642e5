"""The two correlation paths on the GPU: the launch callback gives the rows the pushed ids give.

``correlation="launch"`` (the default with the native decoder) links each launch to the op or scope on
top of the launching thread's id stack; ``correlation="push"`` pushes the same ids to CUPTI and reads
its external-correlation records. On real models both must give the same (module, function, op, kernel)
rows and the same launches (that the launch path collects kernels, copies and sets only, with no API or
external-correlation records, is checked on CPU in ``tests/test_launch_correlation.py``).
Run on the GPU machine (``benchmarks/gpu_run.sh all_tests``); skipped without CUDA.
"""

from __future__ import annotations

import collections
import threading

import pytest
import torch
import torch.nn.functional as F
from fixture_models import cuda_mlp, cuda_quickstart, cuda_sdpa_demo, needs_native
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, schema

pytestmark = [pytest.mark.gpu, needs_native]


class Threaded(nn.Module):
    """A forward that runs a child on a worker thread it starts, beside its own linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.side = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: list[torch.Tensor] = []
        worker = threading.Thread(target=lambda: out.append(self.side(x)))
        worker.start()
        y = F.gelu(self.fc(x))
        worker.join()
        return y + out[0]


class CapturedInside(nn.Module):
    """A CUDA graph captured and replayed inside the profiled forward (graph_capture rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
        self.static = torch.zeros(4, 32, device="cuda")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.static.copy_(x)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.inner(self.static)  # warm the kernels up outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            out = self.inner(self.static)
        graph.replay()
        return out.clone()


def _threaded():
    return Threaded().eval().cuda(), [((torch.randn(16, 64, device="cuda"),), {})]


def _captured_inside():
    return CapturedInside().eval().cuda(), [((torch.randn(4, 32, device="cuda"),), {})]


def _resnet_like():
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, 10),
    )  # fmt: skip
    return model.eval().cuda(), [((torch.randn(4, 3, 32, 32, device="cuda"),), {})]


WORKLOADS = {
    "quickstart": cuda_quickstart,
    "sdpa_demo": cuda_sdpa_demo,
    "mlp": cuda_mlp,
    "resnet_like": _resnet_like,
    "threaded": _threaded,
    "graph_captured_inside": _captured_inside,
}


def _rows(result) -> collections.Counter:
    frame = result.to_pandas()
    return collections.Counter(
        zip(frame["module_name"], frame["function_name"], frame["op"], frame["kernel"], frame["attribution"])
    )


def _profiled(model, samples, correlation):
    profiler = ModuleFunctionKernelProfiler(correlation=correlation)
    profiler.profile(model, samples, warmup_iterations=1)
    return profiler.last_result


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_the_launch_callback_gives_the_rows_and_launches_the_pushed_ids_give(name):
    model, samples = WORKLOADS[name]()
    launch = _profiled(model, samples, "launch")
    push = _profiled(model, samples, "push")
    assert launch.metadata[schema.META_CORRELATION] == "launch"
    assert push.metadata[schema.META_CORRELATION] == "push"
    assert launch.activity.num_rows > 0
    assert _rows(launch) == _rows(push)
    spec_rows = lambda result: [  # noqa: E731 - the spec's rows in order, without the times (they differ run to run)
        (row["module_name"], row["module"], row["function_name"], row["op"], row["kernel"])
        for row in result.profiling_df().to_dict("records")
    ]
    if name == "threaded":
        # the worker's and the forward's kernels interleave as the threads are scheduled, run to run: the
        # order holds within each thread (its modules' rows), not across them
        by_module = lambda rows: {m: [r for r in rows if r[0] == m] for m in {r[0] for r in rows}}  # noqa: E731
        assert by_module(spec_rows(launch)) == by_module(spec_rows(push))
    else:
        assert spec_rows(launch) == spec_rows(push)
    # one launch row per API call, named alike: the callback records what the API records held
    names = lambda result: collections.Counter(result.launches.column("api_name").to_pylist())  # noqa: E731
    assert names(launch) == names(push)
    # every launch row ends after it starts, on the host clock, before its work starts on the GPU
    rows = launch.launches.to_pylist()
    assert all(row["start_ns"] < row["end_ns"] for row in rows)  # the exit's timestamp was written
    launch_of = {row["correlation_id"]: row for row in rows}
    assert all(launch_of[k["correlation_id"]]["start_ns"] <= k["start_ns"] for k in launch.activity.to_pylist())


def test_nothing_of_the_launch_path_is_left_on_after_profile():
    from aitune_dispatch.collection import _cupti_native as native

    model, samples = cuda_quickstart()
    result = _profiled(model, samples, "launch")
    assert result.metadata[schema.META_CORRELATION] == "launch"
    assert native._callback_state() == {"subscribed": False, "graph_observer": False, "launch_callbacks": False}
    assert native.callbacks_unavailable() is None  # CUPTI's subscription is free for another client
