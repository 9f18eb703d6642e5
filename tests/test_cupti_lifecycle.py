"""The CUDA collector's lifecycle, on CPU, against a stand-in for cupti-python.

The fake keeps the state CUPTI would keep (enabled kinds, per-callback-id API switches, the
per-thread external-correlation stack) and turns each "launch" into a kernel record tagged with
the top of that stack, as CUPTI does. What must hold: everything enabled is switched back,
dropped records are reported, a collection that lost its callbacks fails loudly, and timestamps
counted in ticks come out in host nanoseconds.
"""

from __future__ import annotations

import ctypes
import enum
import time

import numpy as np
import pytest
import torch

from aitune_dispatch.collection import cupti_source
from aitune_dispatch.collection.cupti_source import CANARY_ID, SCOPE_BASE, CuptiSource
from aitune_dispatch.collection.decoded import API_RUNTIME, KIND_KERNEL, DecodedRecords

TICKS_PER_NS = 2  # the fake CUPTI clock counts two ticks per host nanosecond
LAUNCH_LEAD_TICKS, LAUNCH_TICKS, LAUNCH_THREAD = 600, 200, 4242  # each cudaLaunchKernel: 300 ns before, 100 ns long


class ActivityKind(enum.IntEnum):
    MEMCPY = 1
    MEMSET = 2
    DRIVER = 4
    RUNTIME = 5
    CONCURRENT_KERNEL = 10
    EXTERNAL_CORRELATION = 39


class ExternalCorrelationKind(enum.IntEnum):
    CUSTOM2 = 5


RuntimeCbid = enum.IntEnum(
    "RuntimeCbid",
    {"INVALID": 0, "cudaMalloc_v3020": 20, "cudaLaunchKernel_v7000": 211, "cudaMemcpyAsync_v3020": 41, "SIZE": 500},
)
DriverCbid = enum.IntEnum(
    "DriverCbid", {"INVALID": 0, "cuCtxGetDevice": 16, "cuLaunchKernel": 307, "cuLaunchKernelEx": 652, "SIZE": 900}
)


class FakeCupti:
    """The slice of cupti-python the collector calls, with CUPTI's state."""

    ActivityKind = ActivityKind
    ExternalCorrelationKind = ExternalCorrelationKind
    runtime_api_trace_cbid = RuntimeCbid
    driver_api_trace_cbid = DriverCbid

    def __init__(self, dropped: int = 0, fail_on: ActivityKind | None = None) -> None:
        self.enabled: set[int] = set()
        self.api: dict[tuple[str, int], int] = {}
        self.stack: list[int] = []
        self.records: list[tuple[int, int, int, int]] = []  # correlation, start, end, external id
        self.launch_records: list[tuple[int, int, int]] = []  # correlation, start, end of its cudaLaunchKernel
        self.dropped = dropped
        self.fail_on = fail_on
        self.callbacks_ours = True
        self._next_correlation = 100

    def activity_enable(self, kind: int) -> None:
        if kind == self.fail_on:
            raise RuntimeError("CUPTI_ERROR_NOT_SUPPORTED")
        self.enabled.add(int(kind))

    def activity_disable(self, kind: int) -> None:
        self.enabled.discard(int(kind))

    def activity_enable_runtime_api(self, cbid: int, flag: int) -> None:
        self.api[("runtime", cbid)] = flag

    def activity_enable_driver_api(self, cbid: int, flag: int) -> None:
        self.api[("driver", cbid)] = flag

    def activity_push_external_correlation_id(self, kind: int, value: int) -> None:
        self.stack.append(value)

    def activity_pop_external_correlation_id(self, kind: int) -> int:
        return self.stack.pop()

    def get_timestamp(self) -> int:
        return time.perf_counter_ns() * TICKS_PER_NS

    def activity_flush_all(self, flag: int) -> None:
        pass

    def activity_get_num_dropped_records(self, context: int, stream: int, pointer: int) -> None:
        ctypes.c_size_t.from_address(pointer).value = self.dropped

    def launch(self, ticks: int) -> None:
        """A kernel launch: recorded when collection is on and our callbacks still own the buffers."""
        if int(ActivityKind.CONCURRENT_KERNEL) not in self.enabled or not self.callbacks_ours:
            return
        start = self.get_timestamp()
        self._next_correlation += 1
        self.records.append((self._next_correlation, start, start + ticks, self.stack[-1] if self.stack else -1))
        launched = start - LAUNCH_LEAD_TICKS
        self.launch_records.append((self._next_correlation, launched, launched + LAUNCH_TICKS))


class FakeSink:
    """A decoder backend that decodes the fake's records: gemm kernels on device 0, stream 7.

    ``launches``: with the API record of each kernel's cudaLaunchKernel (``launch_records``).
    """

    name = "fake"

    def __init__(self, cupti: FakeCupti, launches: bool = True) -> None:
        self.cupti = cupti
        self.launches = launches
        self.registered = 0

    def register(self) -> None:
        self.registered += 1
        self.released_with: set | None = None

    def release(self) -> None:
        self.released_with = set(self.cupti.enabled)  # what was still enabled when the sink let go

    def kernel_devices(self) -> np.ndarray:
        """The device of each kernel record."""
        return np.zeros(len(self.cupti.records), np.int64)

    def take(self) -> DecodedRecords:
        rows = self.cupti.records
        tagged = [r for r in rows if r[3] != -1]
        calls = self.cupti.launch_records
        api = {}
        if self.launches:
            api = dict(
                api_correlation_id=np.array([c[0] for c in calls], np.int64),
                api_kind=np.full(len(calls), API_RUNTIME, np.int8),
                api_cbid=np.full(len(calls), 211, np.int32),  # cudaLaunchKernel_v7000
                api_start_ns=np.array([c[1] for c in calls], np.int64),
                api_end_ns=np.array([c[2] for c in calls], np.int64),
                api_thread=np.full(len(calls), LAUNCH_THREAD, np.int64),
            )
        return DecodedRecords(
            correlation_id=np.array([r[0] for r in rows], np.int64),
            start_ns=np.array([r[1] for r in rows], np.int64),
            end_ns=np.array([r[2] for r in rows], np.int64),
            device=self.kernel_devices(),
            stream=np.full(len(rows), 7, np.int64),
            kind_code=np.full(len(rows), KIND_KERNEL, np.int8),
            name_index=np.zeros(len(rows), np.int32),
            names=["gemm"],
            ext_correlation_id=np.array([r[0] for r in tagged], np.int64),
            ext_id=np.array([r[3] for r in tagged], np.uint64).view(np.int64),
            records=2 * len(rows),
            **api,
        )


class FakeCanary:
    def __init__(self, cupti: FakeCupti) -> None:
        self.cupti = cupti

    def fill_(self, value: float) -> FakeCanary:
        self.cupti.launch(ticks=10)
        return self


@pytest.fixture
def fake(monkeypatch):
    cupti = FakeCupti()
    real_zeros = torch.zeros

    def zeros(*args, **kwargs):
        return FakeCanary(cupti) if kwargs.get("device") == "cuda" else real_zeros(*args, **kwargs)

    monkeypatch.setattr(torch, "zeros", zeros)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(cupti_source, "MIN_CALIBRATION_NS", 1_000_000)
    return cupti


def run_pass(source: CuptiSource, cupti: FakeCupti) -> None:
    source.start()
    try:
        source.scope_entered(3)  # a module forward
        source.op_started(0, "aten::addmm")
        cupti.launch(ticks=2_000)  # 2,000 ticks = 1,000 host ns
        source.op_finished(0)
        cupti.launch(ticks=4_000)  # a Triton-style launch outside any op, inside the scope
        source.scope_exited()
    finally:
        source.stop()


def test_everything_enabled_is_switched_back(fake):
    source = CuptiSource(FakeSink(fake), fake)
    run_pass(source, fake)
    assert fake.enabled == set() and fake.stack == []
    # API records were restricted to launches and copies while collecting, and all are on again
    assert all(flag == 1 for flag in fake.api.values())
    assert set(fake.api) == {
        (d, int(c))
        for d, e in (("runtime", RuntimeCbid), ("driver", DriverCbid))
        for c in e
        if c.name not in ("INVALID", "SIZE")
    }


def test_the_sink_is_released_once_collection_is_disabled(fake):
    sink = FakeSink(fake)
    source = CuptiSource(sink, fake)
    run_pass(source, fake)
    # the native sink tells CUPTI to zero buffers again here: only after the last buffer came back
    assert sink.released_with == set()


def test_api_records_are_restricted_while_collecting(fake):
    source = CuptiSource(FakeSink(fake), fake)
    source.start()
    try:
        switched_on = sorted(cbid for (domain, cbid), flag in fake.api.items() if flag)
        assert switched_on == [41, 211, 307, 652]  # cudaMemcpyAsync, cudaLaunchKernel, cuLaunchKernel(Ex)
    finally:
        source.stop()


def test_records_join_ops_and_scopes_and_ticks_become_nanoseconds(fake):
    source = CuptiSource(FakeSink(fake), fake)
    run_pass(source, fake)
    activity = source.activity()
    kernels = activity.kernels.to_pylist()
    assert len(kernels) == 2  # the canary is gone
    durations = [k["end_ns"] - k["start_ns"] for k in kernels]
    # 2,000 and 4,000 ticks at 2 ticks per ns; the rate is measured from two clock pairs and each
    # timestamp is rounded on its own, so a duration may be off by 1 ns
    assert durations == [pytest.approx(1_000, abs=1), pytest.approx(2_000, abs=1)]
    assert activity.clock_ticks_per_ns == pytest.approx(2.0, rel=1e-3)
    assert activity.correlation.column("op_id").to_pylist() == [0]
    assert activity.scope_correlation.column("context_id").to_pylist() == [3]
    assert CANARY_ID - 2**64 not in activity.correlation.column("op_id").to_pylist()
    assert activity.dropped_records == 0 and activity.warnings == ()


def test_launch_records_share_the_kernels_host_clock_and_lose_the_canary(fake):
    source = CuptiSource(FakeSink(fake), fake)
    run_pass(source, fake)
    activity = source.activity()
    assert len(fake.launch_records) == 4  # the prime's, the two kernels' launches and the canary's
    launches, kernels = activity.launches.to_pylist(), activity.kernels.to_pylist()
    assert [row["correlation_id"] for row in launches] == [k["correlation_id"] for k in kernels] == [102, 103]
    names = [(row["api"], row["cbid"], row["api_name"]) for row in launches]
    assert names == [("runtime", 211, "cudaLaunchKernel")] * 2  # the enum's cudaLaunchKernel_v7000, suffix dropped
    assert [row["os_thread"] for row in launches] == [LAUNCH_THREAD] * 2
    # converted like the kernels (2 ticks per ns): 200 ticks long = 100 ns, 600 ticks = 300 ns before
    # its kernel; +-1 ns because each timestamp is rounded after dividing by the measured rate
    for launch, kernel in zip(launches, kernels):
        assert launch["end_ns"] - launch["start_ns"] == pytest.approx(LAUNCH_TICKS / TICKS_PER_NS, abs=1)
        assert kernel["start_ns"] - launch["start_ns"] == pytest.approx(LAUNCH_LEAD_TICKS / TICKS_PER_NS, abs=1)
    # the first kernel's launch (after the prime's): CUPTI ticks ~ 2 x perf_counter_ns, the host value about half
    raw_start = fake.launch_records[1][1]
    assert launches[0]["start_ns"] == pytest.approx(raw_start / TICKS_PER_NS, abs=1_000)


@pytest.mark.parametrize("primed", [True, False])
def test_start_primes_collection_with_a_kernel_the_result_never_shows(fake, primed):
    source = CuptiSource(FakeSink(fake), fake)
    source.primed = primed
    source.start()
    # what start() launched, with collection on, before the pass's first launch: the prime alone
    assert [r[3] for r in fake.records] == ([cupti_source.PRIME_ID] if primed else [])
    assert fake.stack == []
    source.scope_entered(3)
    source.op_started(0, "aten::addmm")
    fake.launch(ticks=2_000)
    source.op_finished(0)
    source.scope_exited()
    source.stop()
    tagged = [r[3] for r in fake.records]
    assert tagged == [*([cupti_source.PRIME_ID] if primed else []), 0, CANARY_ID]  # the op's id on top
    activity = source.activity()
    assert activity.kernels.num_rows == 1 and activity.launches.num_rows == 1
    assert activity.correlation.column("op_id").to_pylist() == [0]
    assert activity.kernels.column("correlation_id").to_pylist() == [fake.records[-2][0]]


def test_dropped_records_are_a_warning_kept_in_the_result(fake):
    fake.dropped = 3
    source = CuptiSource(FakeSink(fake), fake)
    with pytest.warns(RuntimeWarning, match="dropped 3"):
        run_pass(source, fake)
    activity = source.activity()
    assert activity.dropped_records == 3 and "dropped 3" in activity.warnings[0]


def test_lost_callbacks_fail_loudly(fake):
    source = CuptiSource(FakeSink(fake), fake)
    source.start()
    fake.callbacks_ours = False  # another client registered its buffer callbacks mid-pass
    source.stop()
    with pytest.raises(RuntimeError, match="another CUPTI client"):
        source.activity()
    assert fake.enabled == set()


def test_failed_start_leaves_nothing_enabled(fake):
    fake.fail_on = ActivityKind.EXTERNAL_CORRELATION
    source = CuptiSource(FakeSink(fake), fake)
    with pytest.raises(RuntimeError, match="NOT_SUPPORTED"):
        source.start()
    assert fake.enabled == set() and all(flag == 1 for flag in fake.api.values())


def test_torch_profiler_running_refuses_to_start(fake, monkeypatch):
    monkeypatch.setattr(cupti_source, "torch_profiler_active", lambda: True)
    source = CuptiSource(FakeSink(fake), fake)
    with pytest.raises(RuntimeError, match="torch.profiler is collecting"):
        source.start()
    assert fake.enabled == set() and fake.api == {}


def test_scope_ids_sit_above_op_ids(fake):
    source = CuptiSource(FakeSink(fake), fake)
    source.scope_entered(5)
    assert fake.stack == [SCOPE_BASE + 5]
    source.scope_exited()
