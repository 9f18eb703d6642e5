"""Launch correlation without a GPU: the decoder's per-thread id stack, its launch callback, and the source.

With ``correlation="launch"`` the tracer pushes op and scope ids on the compiled decoder's stack
(``correlation_functions()``) instead of CUPTI's, and the launch callback links each launch to the id
on top of the launching thread's stack. ``_cupti_native._simulate_launch`` runs that callback as CUPTI
would, so a custom op that "launches" shows which id its launch gets, on both tracing backends. The
source's choice between the two paths is checked with a fake cupti-python.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings

import numpy as np
import pytest
import test_cupti_lifecycle as lifecycle
import torch
from fixture_models import cupti_native, needs_native
from test_cupti_lifecycle import ActivityKind, FakeCupti, FakeSink, run_pass
from torch import nn
from torch.library import custom_op

from aitune_dispatch import schema
from aitune_dispatch.collection.cupti_source import CuptiSource
from aitune_dispatch.collection.native import to_decoded
from aitune_dispatch.config import ProfileConfig
from aitune_dispatch.tracing import ModuleTracker, TraceSession, make_tracer, native

KIND = 7
RUNTIME, DRIVER = 0, 1  # records.API_RUNTIME / API_DRIVER
LAUNCH_KERNEL, CU_LAUNCH_KERNEL = 211, 307
_next_correlation = [1000]


def _launch() -> int:
    """One simulated runtime launch on this thread; its correlation id."""
    _next_correlation[0] += 1
    cupti_native._simulate_launch(RUNTIME, LAUNCH_KERNEL, _next_correlation[0])
    return _next_correlation[0]


@custom_op("aitune_test::launching", mutates_args=())
def launching(x: torch.Tensor) -> torch.Tensor:
    """An aten-level op that launches once, as a CUDA op would, and records the launch's id."""
    Launches.seen.append(_launch())
    return x.clone()


class Launches(nn.Module):
    """A launch inside an op (``launching``), then one in the forward outside any op (Triton-style)."""

    seen: list[int] = []

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = launching(self.fc(x))
        Launches.seen.append(_launch())
        return y


class StackTarget:
    """What the CUDA source is with launch correlation: the decoder's stack, for both backends."""

    correlation_kind = KIND

    def correlation_functions(self) -> tuple[int, int]:
        return cupti_native.correlation_functions()

    def op_started(self, op_id: int, op: str) -> None:
        cupti_native.correlation_push(KIND, op_id)

    def op_finished(self, op_id: int) -> None:
        cupti_native.correlation_pop(KIND)

    def scope_entered(self, context_id: int) -> None:
        cupti_native.correlation_push(KIND, native.SCOPE_BASE + context_id)

    def scope_exited(self) -> None:
        cupti_native.correlation_pop(KIND)


@pytest.fixture
def decoder():
    cupti_native._reset(KIND)
    cupti_native.correlation_reset()
    cupti_native._launch_rows(True, runtime_cbids=[LAUNCH_KERNEL], driver_cbids=[CU_LAUNCH_KERNEL])
    yield cupti_native
    cupti_native._launch_rows(False, runtime_cbids=[], driver_cbids=[])
    cupti_native._reset(KIND)


@needs_native
def test_the_stack_pushes_pops_and_is_per_thread(decoder):
    decoder.correlation_push(KIND, 5)
    decoder.correlation_push(KIND, 9)
    assert decoder._correlation_stack() == [5, 9]
    seen: list[list[int]] = []
    worker = threading.Thread(target=lambda: seen.append(decoder._correlation_stack()))
    worker.start()
    worker.join()
    assert seen == [[]]  # another thread's stack is its own
    assert decoder.correlation_pop(KIND) == 9
    decoder.correlation_reset()  # what an interrupted pass left behind reads as empty
    assert decoder._correlation_stack() == [] and decoder.correlation_pop(KIND) is None


@needs_native
def test_a_launch_is_linked_to_the_top_of_its_threads_stack_and_recorded_once(decoder):
    decoder.correlation_push(KIND, 41)
    decoder._simulate_launch(RUNTIME, LAUNCH_KERNEL, 1)
    # the runtime launches through the driver: that inner driver call is part of the runtime one
    decoder._simulate_launch(RUNTIME, LAUNCH_KERNEL, 2, inner_driver_cbid=CU_LAUNCH_KERNEL)
    decoder.correlation_pop(KIND)
    decoder._simulate_launch(DRIVER, CU_LAUNCH_KERNEL, 3)  # a driver launch of its own (Triton), no id on top
    decoder._simulate_launch(RUNTIME, 20, 4)  # a callback id that was not enabled (cudaMalloc): left out
    records = to_decoded(decoder.take())
    assert dict(zip(records.ext_correlation_id.tolist(), records.ext_id.tolist())) == {1: 41, 2: 41}
    assert records.api_correlation_id.tolist() == [1, 2, 3]
    assert records.api_kind.tolist() == [RUNTIME, RUNTIME, DRIVER]
    assert records.api_cbid.tolist() == [LAUNCH_KERNEL, LAUNCH_KERNEL, CU_LAUNCH_KERNEL]
    assert (records.api_end_ns >= records.api_start_ns).all() and (records.api_end_ns > records.api_start_ns).any()
    assert len(set(records.api_thread.tolist())) == 1


@needs_native
def test_without_launch_rows_only_the_links_are_kept(decoder):
    decoder._launch_rows(False)
    decoder.correlation_push(KIND, 3)
    decoder._simulate_launch(RUNTIME, LAUNCH_KERNEL, 8)
    decoder.correlation_pop(KIND)
    decoder._simulate_launch(RUNTIME, LAUNCH_KERNEL, 9)  # nothing on top and no rows: nothing at all
    records = to_decoded(decoder.take())
    assert records.ext_correlation_id.tolist() == [8] and records.ext_id.tolist() == [3]
    assert len(records.api_correlation_id) == 0


@needs_native
@pytest.mark.parametrize("backend", ["native", "python"])
def test_launches_get_the_op_or_scope_the_pushed_ids_would_name(decoder, backend):
    if backend == "native" and not native.available():
        pytest.skip("native tracer not built")
    model, x = Launches(), torch.randn(2, 4)
    Launches.seen = []
    modules = ModuleTracker(model)
    session = TraceSession(modules, make_tracer(backend, modules.module_ids(), None, StackTarget(), False))
    with torch.no_grad(), session:
        model(x)
    assert decoder._correlation_stack() == []  # every push was popped
    tables = session.tables()
    records = to_decoded(decoder.take())
    links = dict(zip(records.ext_correlation_id.tolist(), records.ext_id.tolist()))
    inside_op, outside_ops = Launches.seen
    ops = tables.ops.to_pylist()
    (op,) = [row for row in ops if row["op"] == "aitune_test::launching"]
    assert links[inside_op] == op["op_id"]
    context = links[outside_ops] - native.SCOPE_BASE
    assert context >= 0
    contexts = tables.contexts.to_pylist()
    root = dict((id(module), module_id) for module, module_id in modules.module_ids())[id(model)]
    assert contexts[context]["module_id"] == root and contexts[context]["call_id"] == schema.NO_CALL


# -- the source's choice of path -----------------------------------------------------------------------------


@pytest.fixture
def fake(monkeypatch):
    """test_cupti_lifecycle's fake cupti-python, with torch's CUDA calls stood in for."""
    return lifecycle.fake.__wrapped__(monkeypatch)


class LaunchSink(FakeSink):
    """A fake decoder that holds the launch callback; its stack is the fake CUPTI's, which launches read."""

    launch_callbacks = True

    def __init__(self, cupti: FakeCupti, unavailable: str | None = None) -> None:
        super().__init__(cupti)
        self.unavailable = unavailable
        self.started: tuple | None = None
        self.stopped = 0

    def launch_callbacks_unavailable(self) -> str | None:
        return self.unavailable

    def correlation_functions(self) -> tuple[int, int]:
        return (1, 2)

    def correlation_push(self, kind: int, value: int) -> None:
        self.cupti.stack.append(value)

    def correlation_pop(self, kind: int) -> int | None:
        return self.cupti.stack.pop() if self.cupti.stack else None

    def start_launch_callbacks(self, runtime: list[int], driver: list[int], launch_rows: bool) -> None:
        self.started = (runtime, driver, launch_rows)
        self.enabled_then = set(self.cupti.enabled)
        self.cupti.launch = self._launch_with_callback(self.cupti.launch)

    def _launch_with_callback(self, launch):  # noqa: ANN001, ANN202
        """Launches as the launch callback sees them: linked to the top of the stack whether or not CUPTI's
        activity records still reach us (another client may have taken them)."""
        self.callback_links: list[tuple[int, int]] = []

        def launched(ticks: int) -> None:
            before = len(self.cupti.records)
            launch(ticks)
            if len(self.cupti.records) == before and self.cupti.stack:  # no record, but the callback ran
                self.cupti._next_correlation += 1
                self.callback_links.append((self.cupti._next_correlation, self.cupti.stack[-1]))

        return launched

    def take(self):  # noqa: ANN201
        records = super().take()
        links = getattr(self, "callback_links", [])
        if links:
            records = dataclasses.replace(
                records,
                ext_correlation_id=np.concatenate([records.ext_correlation_id, [c for c, _ in links]]).astype(np.int64),
                ext_id=np.concatenate([records.ext_id, np.array([i for _, i in links], np.uint64).view(np.int64)]),
            )
        return records

    def stop_launch_callbacks(self) -> None:
        self.stopped += 1


def test_launch_correlation_collects_kernels_copies_and_sets_only(fake):
    sink = LaunchSink(fake)
    source = CuptiSource(sink, fake)
    assert source.correlation == "launch" and source.correlation_functions() == (1, 2)
    run_pass(source, fake)
    kinds = {int(k) for k in (ActivityKind.CONCURRENT_KERNEL, ActivityKind.MEMCPY, ActivityKind.MEMSET)}
    assert sink.enabled_then == kinds  # no external-correlation and no API records
    assert sink.started == ([41, 211], [307, 652], True)  # cudaMemcpyAsync, cudaLaunchKernel, cuLaunchKernel(Ex)
    assert sink.stopped == 1 and fake.enabled == set() and fake.stack == []
    assert fake.api == {}  # the API record switches were never touched
    activity = source.activity()
    assert len(activity.kernels) == 2  # the prime and the canary were linked through the sink's stack, and dropped
    assert activity.correlation.to_pylist() == [{"correlation_id": activity.kernels["correlation_id"][0].as_py(),
                                                  "op_id": 0}]  # fmt: skip
    assert len(activity.scope_correlation) == 1


def test_push_is_used_where_the_callbacks_are_taken_and_a_request_for_launch_is_refused(fake):
    with pytest.warns(RuntimeWarning, match="correlation='push'"):
        source = CuptiSource(LaunchSink(fake, unavailable="CUPTI error 39"), fake)
    assert source.correlation == "push"
    with pytest.raises(RuntimeError, match="CUPTI error 39.*pass correlation='push'"):
        CuptiSource(LaunchSink(fake, unavailable="CUPTI error 39"), fake, correlation="launch")
    with pytest.raises(RuntimeError, match="needs the native decoder"):
        CuptiSource(FakeSink(fake), fake, correlation="launch")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert CuptiSource(LaunchSink(fake, unavailable="taken"), fake, correlation="push").correlation == "push"
        assert CuptiSource(FakeSink(fake), fake).correlation == "push"  # cupti-python's decoder: push


def test_push_correlation_enables_external_correlation_and_api_records(fake):
    sink = LaunchSink(fake)
    source = CuptiSource(sink, fake, correlation="push")
    source.start()
    try:
        assert {int(ActivityKind.EXTERNAL_CORRELATION), int(ActivityKind.RUNTIME)} <= fake.enabled
        assert sink.started is None
    finally:
        source.stop()


def test_the_config_refuses_launch_correlation_with_the_python_decoder():
    with pytest.raises(ValueError, match="correlation='launch' needs the native decoder"):
        ProfileConfig(decoder="python", correlation="launch")
    with pytest.raises(ValueError, match="correlation must be None, 'launch' or 'push'"):
        ProfileConfig(correlation="callback")


class CallLog(FakeCupti):
    """A fake that logs the order of kind and API-record switches."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def activity_disable(self, kind: int) -> None:
        self.calls.append(f"disable {ActivityKind(int(kind)).name}")
        super().activity_disable(kind)

    def activity_enable_runtime_api(self, cbid: int, flag: int) -> None:
        self.calls.append(f"runtime api {flag}")
        super().activity_enable_runtime_api(cbid, flag)


def test_push_switches_api_records_back_on_before_it_disables_their_kinds(monkeypatch):
    # CUPTI turns a callback id's records on again when it is switched on: the kinds must be disabled last,
    # or every later collection (ours with launch correlation too) gets every API call's record
    lifecycle.fake.__wrapped__(monkeypatch)  # torch's CUDA calls stood in for
    log = CallLog()
    source = CuptiSource(FakeSink(log), log, correlation="push")
    source.start()
    log.calls.clear()
    source.stop()
    last_switch = max(i for i, call in enumerate(log.calls) if call.startswith("runtime api"))
    assert log.calls.index("disable RUNTIME") > last_switch
    assert log.enabled == set()


def test_launch_correlation_turns_api_record_kinds_off_before_collecting(fake):
    fake.enabled |= {int(ActivityKind.RUNTIME), int(ActivityKind.DRIVER)}  # left on by another client
    sink = LaunchSink(fake)
    source = CuptiSource(sink, fake)
    source.start()
    try:
        assert int(ActivityKind.RUNTIME) not in fake.enabled and int(ActivityKind.DRIVER) not in fake.enabled
    finally:
        source.stop()


def test_launch_correlation_still_fails_the_run_when_another_client_takes_the_records(fake):
    # the canary's link comes from our callback, which always runs: only its kernel record shows that
    # the activity records still reach us
    source = CuptiSource(LaunchSink(fake), fake)
    source.start()
    fake.callbacks_ours = False  # another client registered its buffer callbacks mid-pass
    source.stop()
    with pytest.raises(RuntimeError, match="another CUPTI client"):
        source.activity()
