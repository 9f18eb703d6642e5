"""Launch records on the GPU: one runtime / driver API record per kernel, forward arrows in the trace.

Run on the GPU machine (``benchmarks/gpu_run.sh tests``); skipped without CUDA.
"""

from __future__ import annotations

import collections

import pytest
import torch
from fixture_models import cuda_quickstart, cuda_sdpa_demo
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.reports import perfetto_events
from aitune_dispatch.reports.perfetto import CPU_PID

pytestmark = pytest.mark.gpu


class CopyIn(nn.Module):
    """A host-to-device copy (cudaMemcpyAsync) inside the pass, beside the kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) + host.to(x.device, non_blocking=False)
        return y + torch.zeros_like(y)


def copy_in():
    return CopyIn().eval().cuda(), [((torch.randn(8, 64, device="cuda"), torch.randn(8, 64)), {})]


WORKLOADS = {"quickstart": cuda_quickstart, "sdpa_demo": cuda_sdpa_demo, "copy_in": copy_in}


@pytest.mark.parametrize("decoder", ["native", "python"])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_kernel_has_one_launch_and_every_arrow_goes_forward(name, decoder):
    model, samples = WORKLOADS[name]()
    profiler = ModuleFunctionKernelProfiler(decoder=decoder)
    profiler.profile(model, samples, warmup_iterations=1)
    result = profiler.last_result
    activity, launches = result.activity.to_pylist(), result.launches.to_pylist()
    assert activity and launches
    per_correlation = collections.Counter(row["correlation_id"] for row in launches)
    # exactly one runtime or driver API record per kernel / memcpy / memset
    assert {row["correlation_id"]: per_correlation[row["correlation_id"]] for row in activity} == {
        row["correlation_id"]: 1 for row in activity
    }
    assert {row["api"] for row in launches} <= {"runtime", "driver"}
    assert all(row["api_name"].startswith(("cuda", "cu")) for row in launches)  # named from cupti's enums
    # both on the host clock: a launch call starts before the work it launched starts
    launch_of = {row["correlation_id"]: row for row in launches}
    assert all(launch_of[row["correlation_id"]]["start_ns"] <= row["start_ns"] for row in activity)

    trace = perfetto_events(result)
    pairs: dict[int, dict[str, dict]] = {}
    for event in trace["traceEvents"]:
        if event["ph"] in ("s", "f"):
            pairs.setdefault(event["id"], {})[event["ph"]] = event
    assert len(pairs) == len(activity) and trace["otherData"]["flows_skipped"] == 0  # one arrow per row
    assert all(pair["s"]["ts"] <= pair["f"]["ts"] for pair in pairs.values())  # never back in time
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in ("cuda_runtime", "cuda_driver")]
    assert len(slices) == len(launches)
    # every arrow starts on a launch slice of the profiling thread's track (recorder thread 0, tid 1)
    assert {(pair["s"]["pid"], pair["s"]["tid"]) for pair in pairs.values()} == {(CPU_PID, 1)}
    # one thread launched everything, and its CUPTI thread id maps to that track, claimed by an op or not
    assert {(e["pid"], e["tid"]) for e in slices} == {(CPU_PID, 1)}
