"""Several GPUs in one process, on CPU: canaries and synchronisation per device, one clock, the views.

The CUDA collector runs against the stand-in for cupti-python of ``test_cupti_lifecycle.py``,
extended so that each launch lands on a device. What must hold: every device in use (also one first
used during the pass) is synchronised and gets a canary; a device whose canary never arrives fails
the run by name; with one GPU nothing extra is called; the calibration covers every device; and
``describe(by="device")``, the trace's track groups and ``deviceProperties`` split by device.
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.distributed as dist
from fixture_results import activity_table
from test_cupti_lifecycle import FakeCupti, FakeSink, run_pass
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, ProfileResult, schema
from aitune_dispatch.collection import devices
from aitune_dispatch.collection.cupti_source import CuptiSource
from aitune_dispatch.collection.distributed import rank_metadata
from aitune_dispatch.reports.perfetto import GPU_PID_BASE, device_properties, perfetto_events
from aitune_dispatch.results import TensorMeta


# -- the collector, against a CUPTI stand-in whose launches land on devices ------------------------------
class DeviceCupti(FakeCupti):
    """FakeCupti whose launches carry a device; records of ``lost_devices`` never reach the sink."""

    def __init__(self) -> None:
        super().__init__()
        self.devices: list[int] = []
        self.lost_devices: set[int] = set()

    def launch(self, ticks: int, device: int = 0) -> None:
        before = len(self.records)
        super().launch(ticks)
        if len(self.records) > before:
            if device in self.lost_devices:
                self.records.pop()
            else:
                self.devices.append(device)


class DeviceSink(FakeSink):
    """FakeSink whose kernel records carry their launch's device, without API records."""

    def __init__(self, cupti: DeviceCupti) -> None:
        super().__init__(cupti, launches=False)

    def kernel_devices(self) -> np.ndarray:
        return np.array(self.cupti.devices, np.int64)


class Canary:
    def __init__(self, cupti: DeviceCupti, device: int) -> None:
        self.cupti, self.device = cupti, device

    def fill_(self, value: float) -> Canary:
        self.cupti.launch(ticks=10, device=self.device)
        return self


@pytest.fixture
def gpus(monkeypatch):
    """The stand-in, with ``in_use`` (devices besides the current one, at start and at stop) to set."""
    cupti = DeviceCupti()
    state = {"in_use": [(), ()], "calls": 0, "synchronized": [], "allocated": []}

    def other_devices_in_use() -> tuple[int, ...]:
        phase = min(state["calls"], 1)
        state["calls"] += 1
        return state["in_use"][phase]

    def empty(*args, device=None, **kwargs):
        state["allocated"].append(device)
        return Canary(cupti, int(str(device).split(":")[1]))

    monkeypatch.setattr(devices, "other_devices_in_use", other_devices_in_use)
    monkeypatch.setattr(devices, "synchronize", lambda ds: state["synchronized"].append(tuple(ds)))
    monkeypatch.setattr(torch, "zeros", lambda *a, device=None, **k: Canary(cupti, 0))
    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    from aitune_dispatch.collection import cupti_source

    monkeypatch.setattr(cupti_source, "MIN_CALIBRATION_NS", 1_000_000)
    return cupti, state


def test_one_gpu_adds_no_call(gpus):
    cupti, state = gpus
    source = CuptiSource(DeviceSink(cupti), cupti)
    run_pass(source, cupti)
    activity = source.activity()
    assert state["allocated"] == []  # no canary besides the current device's
    assert state["synchronized"] == [(), (), ()]  # nothing else to wait for, at start, after the prime, at stop
    # 4 launches: the prime, the op's kernel, the scope's kernel, the current device's canary (prime and canary dropped)
    assert len(cupti.records) == 4 and activity.kernels.num_rows == 2
    assert activity.warnings == ()


def test_every_device_in_use_is_synchronized_and_has_a_canary(gpus):
    cupti, state = gpus
    state["in_use"] = [(1,), (1,)]
    source = CuptiSource(DeviceSink(cupti), cupti)
    source.start()
    try:
        source.op_started(0, "aten::mm")
        cupti.launch(ticks=2_000, device=1)  # the pass's kernel on cuda:1
        source.op_finished(0)
    finally:
        source.stop()
    activity = source.activity()
    assert state["allocated"] == ["cuda:1"]  # once: at start, reused at stop
    assert state["synchronized"] == [(1,), (1,), (1,)]  # before collecting, after the primes, after the canaries
    # 5 launches: the primes of cuda:0 and cuda:1, the pass's, the two canaries; primes and canaries are dropped
    assert cupti.devices == [0, 1, 1, 0, 1] and activity.kernels.to_pydict()["device"] == [1]


def test_a_device_first_used_during_the_pass_gets_its_canary_at_the_end(gpus):
    cupti, state = gpus
    state["in_use"] = [(), (1,)]
    source = CuptiSource(DeviceSink(cupti), cupti)
    run_pass(source, cupti)
    source.activity()
    assert state["allocated"] == ["cuda:1"] and state["synchronized"] == [(), (), (1,)]
    assert cupti.devices[-2:] == [0, 1]  # the two canaries, current device first


def test_a_device_whose_canary_never_arrived_fails_the_run_by_name(gpus):
    cupti, state = gpus
    state["in_use"] = [(1,), (1,)]
    cupti.lost_devices = {1}
    source = CuptiSource(DeviceSink(cupti), cupti)
    run_pass(source, cupti)
    with pytest.raises(RuntimeError, match=r"canary kernel launched on cuda:1 .* never reached"):
        source.activity()
    assert cupti.enabled == set()  # everything was switched back all the same


# -- one clock for every device --------------------------------------------------------------------------
def _kernels(rows: list[tuple[int, int, int]]) -> pa.Table:
    """KERNELS rows from (device, start, end)."""
    n = len(rows)
    return pa.table(
        {
            "correlation_id": list(range(n)),
            "name": ["k"] * n,
            "start_ns": [r[1] for r in rows],
            "end_ns": [r[2] for r in rows],
            "device": pa.array([r[0] for r in rows], pa.int32()),
            "stream": [7] * n,
            "kind": ["kernel"] * n,
        },
        schema=schema.KERNELS,
    )


def test_the_calibration_covers_every_device():
    inside = [(0, 1_000_000, 2_000_000), (1, 1_500_000, 2_500_000)]
    assert devices.clock_coverage_warnings(_kernels(inside), 900_000, 3_000_000) == []
    # cuda:1 ends 3,200,000 - 3,000,000 = 200,000 ns after the interval, past the 100,000 ns tolerance
    late = [(0, 1_000_000, 2_000_000), (1, 1_500_000, 3_200_000)]
    (warning,) = devices.clock_coverage_warnings(_kernels(late), 900_000, 3_000_000)
    assert "GPU 1" in warning and "1500000..3200000" in warning and "900000..3000000" in warning
    # within the tolerance: 850,000 is 50,000 ns before the start, 3,050,000 is 50,000 ns past the end
    within = [(0, 850_000, 2_000_000), (1, 950_000, 3_050_000)]
    assert devices.clock_coverage_warnings(_kernels(within), 900_000, 3_000_000) == []


def test_one_device_needs_no_coverage_check():
    # a single device is on the calibrated clock by construction: nothing to compare it with
    assert devices.clock_coverage_warnings(_kernels([(0, 0, 10**12)]), 900_000, 3_000_000) == []


def test_device_metadata_only_for_several_gpus(monkeypatch):
    monkeypatch.setattr(devices, "_properties", lambda d: {"gpu_name": f"GPU model {d}", "gpu_sm_count": "132"})
    one = _kernels([(0, 0, 1), (0, 2, 3)])
    assert devices.device_metadata(one) == {}  # single-GPU results keep exactly their keys
    two = _kernels([(1, 0, 1), (0, 2, 3), (-1, 4, 5)])
    facts = devices.device_metadata(two)
    assert facts[schema.GPU_DEVICES_KEY] == "0,1"  # -1 (CPU) is no GPU
    assert json.loads(facts[schema.GPU_PROPERTIES_KEY]) == {
        "0": {"gpu_name": "GPU model 0", "gpu_sm_count": "132"},
        "1": {"gpu_name": "GPU model 1", "gpu_sm_count": "132"},
    }


def test_devices_in_use_is_empty_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only answer")
    assert devices.devices_in_use() == () and devices.other_devices_in_use() == ()


# -- views by device -------------------------------------------------------------------------------------
def _meta(device: str) -> TensorMeta:
    return TensorMeta((4, 8), "float32", (8, 1), device, "strided", 4)


# (device, module_name, function_name, kernel_us); module "a" (id 1) on cuda:0, "b" (id 2) on cuda:1
ROWS = [
    (0, "a", "linear", 10.0),
    (0, "a", "linear", 5.0),
    (0, "a", "relu", 1.0),
    (1, "b", "linear", 20.0),
    (1, "b", "relu", 4.0),
    (1, "b", None, 3.0),  # no functional call: not attributed
]
FUNCTION_DATA = {
    "linear": [(1, ((_meta("cuda:0"),), {})), (2, ((_meta("cuda:1"),), {}))],
    "relu": [(1, ((_meta("cuda:0"),), {})), (1, ((_meta("cuda:1"),), {}))],
}


def two_device_result(rows=ROWS, function_data=FUNCTION_DATA, metadata=None) -> ProfileResult:
    modules = {"a": 1, "b": 2}
    activity = activity_table(
        kernel=[f"kernel_{fn}" for _, _, fn, _ in rows],
        kernel_us=[us for _, _, _, us in rows],
        function_name=[fn for _, _, fn, _ in rows],
        device=[d for d, _, _, _ in rows],
        module_id=[modules[m] for _, m, _, _ in rows],
        module_name=[m for _, m, _, _ in rows],
    )
    table = pa.table(
        {"module_id": [0, 1, 2], "module_name": ["", "a", "b"], "module_type": ["M", "L", "L"]},
    ).append_column("parent_module_id", pa.array([-1, 0, 0], pa.int64()))
    ops, calls, forwards = (schema.empty(s) for s in (schema.OPS, schema.CALLS, schema.MODULE_CALLS))
    return ProfileResult(activity, ops, calls, table, forwards, function_data, "synthetic", metadata=metadata or {})


def test_describe_by_device_is_each_devices_own_summary():
    table = two_device_result().describe(by="device")
    assert list(table.columns) == ["device", *schema.SUMMARY_COLUMNS]
    rows = table.set_index(["device", "function_name"])
    # cuda:0: linear 10 + 5 = 15 µs of 15 + 1 = 16 attributed -> 93.75 %; relu 1 / 16 -> 6.25 %
    assert rows.loc[(0, "linear"), "time_spent_us"] == 15.0 and rows.loc[(0, "linear"), "time_spent_pct"] == 93.75
    assert rows.loc[(0, "relu"), "time_spent_pct"] == 6.25
    # cuda:1: linear 20 of 20 + 4 = 24 (the 3 µs outside any call is not attributed) -> 83.33 %
    assert rows.loc[(1, "linear"), "time_spent_pct"] == pytest.approx(100 * 20 / 24)
    # samples go to their tensors' device: linear's cuda:1 sample was called twice
    assert rows.loc[(0, "linear"), "calls"] == 1 and rows.loc[(1, "linear"), "calls"] == 2
    assert rows.loc[(1, "linear"), "num_distinct_samples"] == 1
    # 4 * 8 float32 = 128 bytes per sample
    assert rows.loc[(1, "relu"), "tensor_size_MB"] == 128 / 2**20
    assert list(table["device"]) == [0, 0, 1, 1]  # devices ascending, most expensive first within


def test_describe_by_device_of_one_device_is_describe():
    rows = [r for r in ROWS if r[0] == 1]
    data = {name: [entries[1]] for name, entries in FUNCTION_DATA.items()}
    result = two_device_result(rows, data)
    split = result.describe(by="device")
    assert (split["device"] == 1).all()
    assert split.drop(columns="device").equals(result.describe())


def test_describe_by_rejects_unknown_splits():
    with pytest.raises(ValueError, match="by must be None, 'device' or 'rank'"):
        two_device_result().describe(by="stream")


def test_one_trace_track_group_per_device():
    properties = {"0": {"gpu_name": "H200", "gpu_sm_count": "132"}, "1": {"gpu_name": "H100", "gpu_sm_count": "114"}}
    result = two_device_result(metadata={schema.GPU_PROPERTIES_KEY: json.dumps(properties), "gpu_name": "H200"})
    trace = perfetto_events(result, gpu_clock_offset_ns=0)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {GPU_PID_BASE: "GPU 0", GPU_PID_BASE + 1: "GPU 1"}
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # 3 rows ran on cuda:0 and 3 on cuda:1, each in its device's process
    assert sorted(e["pid"] for e in slices) == [GPU_PID_BASE] * 3 + [GPU_PID_BASE + 1] * 3
    assert all(e["args"]["device"] == e["pid"] - GPU_PID_BASE for e in slices)
    # each device has its own properties
    assert device_properties(result) == [
        {"id": 0, "name": "H200", "numSms": 132},
        {"id": 1, "name": "H100", "numSms": 114},
    ]


# -- rank metadata -------------------------------------------------------------------------------------------
class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


def test_rank_metadata_only_under_a_process_group(tmp_path, op_tracer):
    assert rank_metadata() == {}
    model, samples = Tiny().eval(), [((torch.randn(2, 4),), {})]
    profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer=op_tracer)
    profiler.profile(model, samples, warmup_iterations=0)
    without = dict(profiler.last_result.metadata)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        profiler.profile(model, samples, warmup_iterations=0)
        under = dict(profiler.last_result.metadata)
    finally:
        dist.destroy_process_group()
    added = {key: under[key] for key in under.keys() - without.keys()}
    assert added == {"rank": "0", "world_size": "1", "host": socket.gethostname(), "distributed_backend": "gloo"}
    assert not any(key in without for key in added)  # nothing of it without a process group
