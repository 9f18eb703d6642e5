"""Several CUDA streams and devices, and ranks, on real GPUs.

One GPU (``pytest -m gpu``): kernels on several streams of one device, and the merge of two real
CUDA results saved from two runs. Two GPUs (skipped unless ``torch.cuda.device_count() >= 2``): a
model split over cuda:0 and cuda:1 in one process, and a 2-rank NCCL job (``distributed_job.py``,
one process per GPU, rendezvous on 127.0.0.1, NVLink multicast kept off) with an all-reduce inside
a profiled module. Everywhere: every kernel attributed to a module and an op, and the kernel
multiset equal to a bare CUPTI capture of the same pass.
"""

from __future__ import annotations

import collections
import json

import pyarrow.compute as pc
import pytest
import torch
import torch.nn.functional as F
from conftest import bare_kernels
from distributed_job import launch
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, encoded, schema
from aitune_dispatch.demo import demo_workload
from aitune_dispatch.reports import perfetto_events, write_report
from aitune_dispatch.reports.perfetto import GPU_PID_BASE, RANK_PID_STRIDE, device_properties
from aitune_dispatch.results import collectives, compare_ranks, function_ranks, load, rank_summary, select_rank
from aitune_dispatch.results.views.ranks import NCCL_KERNEL
from aitune_dispatch.tracing import native

pytestmark = pytest.mark.gpu
two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices"
)
SINGLE_GPU_KEYS = {schema.GPU_DEVICES_KEY, schema.GPU_PROPERTIES_KEY, schema.RANK_KEY, schema.WORLD_SIZE_KEY}


def kernel_names(result) -> collections.Counter[str]:
    return collections.Counter(result.activity.column("kernel").to_pylist())


def assert_every_kernel_attributed(result) -> None:
    activity = encoded.decoded(result.activity).to_pandas()
    assert len(activity) > 0
    assert activity["op_id"].notna().all(), activity[activity["op_id"].isna()]["kernel"].tolist()
    assert (activity["module_id"] >= 0).all(), activity[activity["module_id"] < 0]["kernel"].tolist()
    assert result.dropped_records == 0 and result.warnings == ()


def warm(model, samples) -> None:
    with torch.no_grad():
        for args, kwargs in samples:
            model(*args, **kwargs)
    torch.cuda.synchronize()


# -- one GPU --------------------------------------------------------------------------------------------
class ThreeStreams(nn.Module):
    """Two linears on two side streams while a third runs on the current stream."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = (nn.Linear(256, 256) for _ in range(3))
        self.sides = (torch.cuda.Stream(), torch.cuda.Stream())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        main = torch.cuda.current_stream()
        outputs = []
        for side, layer in zip(self.sides, (self.a, self.b)):
            side.wait_stream(main)
            with torch.cuda.stream(side):
                outputs.append(layer(x))
        z = self.c(x)
        for side in self.sides:
            main.wait_stream(side)
        return F.relu(outputs[0] + outputs[1] + z)


def test_kernels_of_several_streams_are_attributed_and_traced_per_stream():
    model = ThreeStreams().eval().cuda()
    samples = [((torch.randn(64, 256, device="cuda"),), {})]
    warm(model, samples)
    expected = bare_kernels(model, samples)
    profiler = ModuleFunctionKernelProfiler()
    profiler.profile(model, samples, warmup_iterations=1)
    result = profiler.last_result
    assert kernel_names(result) == expected
    assert_every_kernel_attributed(result)
    activity = encoded.decoded(result.activity).to_pandas()
    streams = activity.groupby("module_name")["stream"].agg(set)
    assert len(streams["a"] | streams["b"] | streams["c"]) == 3  # each linear on its own stream
    # one device: describe(by="device") is describe() under device 0, and no multi-device keys
    split = result.describe(by="device")
    assert set(split["device"]) == {torch.cuda.current_device()}
    assert split.drop(columns="device").equals(result.describe())
    assert not SINGLE_GPU_KEYS & set(result.metadata)
    trace = perfetto_events(result)
    device = GPU_PID_BASE + torch.cuda.current_device()
    gpu_tracks = {e["tid"] for e in trace["traceEvents"] if e.get("name") == "thread_name" and e["pid"] == device}
    assert gpu_tracks == set(activity["stream"])  # one track per stream, in the device's one process


def test_two_saved_cuda_runs_merge(tmp_path):
    model, samples = demo_workload("cuda")
    warm(model, samples)
    runs = []
    for index in range(2):
        profiler = ModuleFunctionKernelProfiler()
        profiler.profile(model, samples, warmup_iterations=1)
        runs.append(profiler.last_result)
        profiler.last_result.save(tmp_path / "runs" / f"run{index}")
    merged = aitune_dispatch.load(tmp_path / "runs")  # no process group: ranks by name order
    assert merged.metadata[schema.MERGED_RANKS_KEY] == "0,1" and merged.source == runs[0].source
    assert merged.activity.num_rows == runs[0].activity.num_rows + runs[1].activity.num_rows
    for rank, run in enumerate(runs):
        back = select_rank(merged, rank)
        assert kernel_names(back) == kernel_names(run)
        assert back.describe().equals(load(tmp_path / "runs" / f"run{rank}").describe())
    # the same pass twice: twice the calls, the same distinct samples
    one = runs[0].describe(top_k=100).set_index("function_name").sort_index()
    both = merged.describe(top_k=100).set_index("function_name").sort_index()
    assert list(both.index) == list(one.index)
    assert (both["calls"] == 2 * one["calls"]).all()
    assert (both["num_distinct_samples"] == one["num_distinct_samples"]).all()
    view = function_ranks(merged)
    assert (view["ranks"] == 2).all() and set(view["function_name"]) == set(one.index)
    comparison = compare_ranks(merged, 0, 1)
    assert (comparison["before_kernels"] == comparison["after_kernels"]).all()  # the same kernels in both runs
    assert list(rank_summary(merged)["devices"]) == [str(torch.cuda.current_device())] * 2
    trace = perfetto_events(merged)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    device = torch.cuda.current_device()
    assert names == {"rank 0 CPU", f"rank 0 GPU {device}", "rank 1 CPU", f"rank 1 GPU {device}"}
    gpu_slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] % RANK_PID_STRIDE >= GPU_PID_BASE]
    assert len(gpu_slices) == merged.activity.num_rows
    assert 'id="ranks"' in write_report(merged, tmp_path / "runs.html").read_text()


# -- two GPUs, one process ------------------------------------------------------------------------------
class SplitModel(nn.Module):
    """A pipeline of two stages: ``first`` on cuda:0, ``second`` on cuda:1."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Sequential(nn.Linear(128, 256), nn.ReLU()).to("cuda:0")
        self.second = nn.Sequential(nn.Linear(256, 64), nn.GELU()).to("cuda:1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x).to("cuda:1"))


@two_gpus
def test_a_model_split_over_two_gpus():
    model = SplitModel().eval()
    samples = [((torch.randn(32, 128, device="cuda:0"),), {}), ((torch.randn(8, 128, device="cuda:0"),), {})]
    warm(model, samples)
    expected = bare_kernels(model, samples)
    profiler = ModuleFunctionKernelProfiler()
    profiler.profile(model, samples, warmup_iterations=1)
    result = profiler.last_result
    assert kernel_names(result) == expected
    assert_every_kernel_attributed(result)  # also: the calibration covered both devices (no warning)
    activity = encoded.decoded(result.activity).to_pandas()
    stage = activity["module_name"].str.split(".").str[0]
    assert set(activity.loc[stage == "first", "device"]) == {0}
    assert set(activity.loc[stage == "second", "device"]) == {1}
    assert result.metadata[schema.GPU_DEVICES_KEY] == "0,1"
    properties = json.loads(result.metadata[schema.GPU_PROPERTIES_KEY])
    assert properties["1"]["gpu_name"] == torch.cuda.get_device_properties(1).name
    split = result.describe(by="device").set_index(["device", "function_name"])
    # one linear per stage and sample: 2 calls on each device; relu on cuda:0, gelu on cuda:1
    assert split.loc[(0, "linear"), "calls"] == 2 and split.loc[(1, "linear"), "calls"] == 2
    assert split.loc[(0, "relu"), "calls"] == 2 and split.loc[(1, "gelu"), "calls"] == 2
    assert (0, "gelu") not in split.index and (1, "relu") not in split.index
    trace = perfetto_events(result)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names[GPU_PID_BASE] == "GPU 0" and names[GPU_PID_BASE + 1] == "GPU 1"
    assert [entry["id"] for entry in device_properties(result)] == [0, 1]


# -- two GPUs, two ranks (NCCL) ------------------------------------------------------------------------------
TRACERS = ["native", "python"] if native.available() else ["python"]
SAMPLES = 2


@two_gpus
@pytest.mark.single_backend
def test_a_two_rank_nccl_job(tmp_path):
    launch(tmp_path, device="cuda", tracers=",".join(TRACERS), timeout_s=420)
    for tracer in TRACERS:
        ranks = [load(tmp_path / tracer / f"rank{rank}") for rank in (0, 1)]
        for rank, result in enumerate(ranks):
            facts = json.loads((tmp_path / f"rank{rank}.json").read_text())
            assert result.metadata["distributed_backend"] == "nccl" and result.metadata["rank"] == str(rank)
            assert kernel_names(result) == facts["bare"]  # the job ran as without the profiler
            assert_every_kernel_attributed(result)
            activity = encoded.decoded(result.activity).to_pandas()
            assert set(activity.loc[activity["kind"] == "kernel", "device"]) == {rank}  # rank r on cuda:r
            nccl = activity[activity["kernel"].str.contains(NCCL_KERNEL)]
            assert len(nccl) == SAMPLES  # one all-reduce kernel per sample
            assert set(nccl["op"]) == {"c10d::allreduce_"} and set(nccl["module_name"]) == {"sync"}
        merged = aitune_dispatch.load(tmp_path / tracer)
        assert pc.unique(merged.activity["rank"]).to_pylist() == [0, 1]
        reduce = collectives(merged)
        assert list(reduce["rank"]) == [0, 1] and list(reduce["calls"]) == [SAMPLES, SAMPLES]
        assert list(rank_summary(merged)["devices"]) == ["0", "1"]
        by_rank = merged.describe(by="rank").set_index(["rank", "function_name"])
        # rank r runs r + 1 linear layers on 2 samples
        assert by_rank.loc[(0, "linear"), "calls"] == 2 and by_rank.loc[(1, "linear"), "calls"] == 4
