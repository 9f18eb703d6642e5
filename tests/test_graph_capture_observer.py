"""observe_graph_captures without a GPU: the capture patch and its removal, what a capture records, and a
later profile()'s attribution of the replays, driven through the compiled collector's simulated nodes."""

from __future__ import annotations

import gc
import types

import pandas as pd
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from fixture_models import StackSource, cupti_native, needs_native
from torch import nn

from aitune_dispatch import schema
from aitune_dispatch.provenance import capture as provenance_capture
from aitune_dispatch.provenance import observer as graph_observer
from aitune_dispatch.tracing import ModuleTracker
from aitune_dispatch.tracing import modules as tracing_modules

pytestmark = pytest.mark.single_backend  # the python tracer: the stand-in source has no C push functions



class FakeGraph:
    """Stands for a torch.cuda.CUDAGraph (weakly referenceable, as it is)."""


@pytest.fixture
def fake_capture(monkeypatch):
    """CUDAGraph.capture_begin / capture_end replaced by recorders (a CPU torch cannot capture), the
    decoder's node subscription by the compiled collector's simulation hooks."""
    calls: list[str] = []

    def begin(graph, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        calls.append("begin")

    def end(graph, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        calls.append("end")

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", begin)
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", end)
    subscription: list[str] = []
    fake = types.SimpleNamespace(
        graph_observer_start=lambda kind: subscription.append(f"start {kind}"),
        graph_observer_stop=lambda: subscription.append("stop"),
        graph_observer_take=cupti_native.graph_observer_take if cupti_native else lambda: None,
    )
    monkeypatch.setattr(graph_observer, "loaded_decoder", lambda: fake)
    monkeypatch.setattr(provenance_capture, "_native_decoder", lambda: fake)
    graph_observer.forget_observations()
    if cupti_native is not None:
        cupti_native.graph_observer_take()
    yield types.SimpleNamespace(begin=begin, end=end, calls=calls, subscription=subscription)
    graph_observer.forget_observations()


class Inner(nn.Module):
    def __init__(self, source: StackSource) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.source = source

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.fc(x))
        # a node launched in this forward's own scope (as a kernel of its own code would be)
        top = self.source.stack[-1] if self.source.stack else -1
        cupti_native._simulate_graph_node(schema.GRAPH_NODE_CREATED, 1, 11, top)
        return y


class Outer(nn.Module):
    """Captures a graph inside its own forward, as a serving wrapper or a cudagraph tree does."""

    def __init__(self, source: StackSource) -> None:
        super().__init__()
        self.inner = Inner(source)
        self.source = source
        self.graph = FakeGraph()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.cuda.CUDAGraph.capture_begin(self.graph)
        # launched in Outer's forward, which began before the observer's hooks were installed
        top = self.source.stack[-1] if self.source.stack else -1  # nothing pushed: a capture not traced
        cupti_native._simulate_graph_node(schema.GRAPH_NODE_CREATED, 1, 10, top)
        y = self.inner(x)
        for node in (10, 11):  # instantiation clones the nodes; replays report the clones
            cupti_native._simulate_graph_node(schema.GRAPH_NODE_CLONED, 2, 10 + node, -1, 1, node)
        torch.cuda.CUDAGraph.capture_end(self.graph)
        return y


def replay_activity(nodes: list[int]) -> pa.Table:
    count = len(nodes)
    return pa.table(
        {
            "correlation_id": [50] * count, "kernel": [f"k{n}" for n in nodes], "kind": ["kernel"] * count,
            "start_ns": list(range(count)), "end_ns": [n + 1000 for n in range(count)],
            "kernel_us": [1.0] * count, "device": pa.array([0] * count, pa.int32()), "stream": [7] * count,
            "op_id": pa.array([None] * count, pa.int64()), "op": pa.array([None] * count, pa.string()),
            "module_id": [0] * count, "module_name": [""] * count, "call_id": [-1] * count,
            "function_name": pa.array([None] * count, pa.string()), "thread": [0] * count,
            "graph_id": [2] * count, "graph_node_id": nodes, "attribution": ["trace"] * count,
        },
        schema=schema.ACTIVITY,
    )


def attribute_later(profiled: nn.Module, activity: pa.Table):  # noqa: ANN201
    """What a later profile() of ``profiled`` makes of ``activity`` (its ProvenanceCapture's attribution)."""
    tracker = ModuleTracker(profiled)
    with provenance_capture.ProvenanceCapture("cuda", StackSource(), "python") as capture:
        return capture.attribute(activity, schema.empty(schema.CALLS), tracker.table(), tracker)


def test_the_capture_methods_are_patched_only_while_it_observes(fake_capture):
    source = StackSource()
    observer = graph_observer.GraphCaptureObserver(nn.Linear(2, 2), "python", False, source)
    with observer:
        assert torch.cuda.CUDAGraph.capture_begin is not fake_capture.begin
        assert torch.cuda.CUDAGraph.capture_begin.__wrapped__ is fake_capture.begin
        assert observer.active
        with pytest.raises(RuntimeError, match="another graph-capture observer is active"):
            graph_observer.GraphCaptureObserver(nn.Linear(2, 2), "python", False, source).start()
    assert torch.cuda.CUDAGraph.capture_begin is fake_capture.begin
    assert torch.cuda.CUDAGraph.capture_end is fake_capture.end
    assert not observer.active
    with pytest.raises(RuntimeError, match="observes once"):
        observer.start()


def test_everything_is_removed_when_the_observed_block_raises(fake_capture):
    from torch.overrides import _get_current_function_mode_stack

    model = nn.Linear(2, 2)
    graph = FakeGraph()
    modes_before = len(_get_current_function_mode_stack())
    with pytest.raises(KeyboardInterrupt):
        with graph_observer.GraphCaptureObserver(model, "python", False, StackSource()):
            torch.cuda.CUDAGraph.capture_begin(graph)
            assert tracing_modules._installed  # the capture is traced: hooks and modes installed
            raise KeyboardInterrupt  # the capture never ends
    assert torch.cuda.CUDAGraph.capture_begin is fake_capture.begin
    assert not tracing_modules._installed
    assert len(_get_current_function_mode_stack()) == modes_before
    assert fake_capture.subscription == ["start 5", "stop"]
    assert graph_observer.observations() == []  # an unfinished capture is not kept


def test_nothing_is_traced_outside_captures(fake_capture):
    model = nn.Linear(2, 2)
    with graph_observer.GraphCaptureObserver(model, "python", False, StackSource()):
        model(torch.randn(1, 2))
        assert not tracing_modules._installed
    assert fake_capture.subscription == []  # no capture: never subscribed


@needs_native
def test_the_observer_times_its_own_work_around_each_capture(fake_capture):
    source = StackSource()
    outer = Outer(source)
    observer = graph_observer.GraphCaptureObserver(outer, "python", False, source)
    assert observer.seconds == {"begin": 0.0, "end": 0.0}
    with torch.no_grad(), observer:
        outer(torch.randn(2, 4))
        after_one = dict(observer.seconds)
        outer(torch.randn(2, 4))
    assert observer.captured == 2
    # both steps ran and were timed, and a second capture adds to the sums
    assert after_one["begin"] > 0 and after_one["end"] > 0
    assert observer.seconds["begin"] > after_one["begin"] and observer.seconds["end"] > after_one["end"]


class _CountingOuter(Outer):
    """Outer, counting how often its hierarchy is walked."""

    walks = 0

    def named_modules(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        type(self).walks += 1
        return super().named_modules(*args, **kwargs)


@needs_native
def test_the_hierarchy_is_read_once_when_the_observer_starts_not_per_capture(fake_capture):
    source = StackSource()
    outer = _CountingOuter(source)
    with torch.no_grad(), graph_observer.GraphCaptureObserver(outer, "python", False, source) as observer:
        read_at_start = _CountingOuter.walks
        for _ in range(3):
            outer(torch.randn(2, 4))
        assert _CountingOuter.walks == read_at_start == 1
    assert observer.captured == 3
    # every capture names the modules it ran in
    for observation in graph_observer.observations():
        assert [ref() for ref in observation.modules] == [outer, outer.inner, outer.inner.fc]
        # Outer (entered as the capture began inside its forward), Inner and its Linear
        assert set(observation.trace.module_calls["module_id"].to_pylist()) == {0, 1, 2}


@needs_native
def test_replays_of_an_observed_capture_are_attributed_by_a_later_profile(fake_capture):
    source = StackSource()
    outer = Outer(source)
    with torch.no_grad(), graph_observer.GraphCaptureObserver(outer, "python", False, source) as observer:
        outer(torch.randn(2, 4))
    assert fake_capture.calls == ["begin", "end"]
    assert observer.captured == 1 and source.stack == []
    assert not tracing_modules._installed
    # profiled as part of a larger model: module ids differ from the capture's, names follow the objects
    profiled = nn.Sequential(outer)
    with pytest.warns(RuntimeWarning) as caught:
        attributed, metadata, messages = attribute_later(profiled, replay_activity([20, 21, 99]))
    rows = attributed.activity.to_pylist()
    by_node = {row["graph_node_id"]: row for row in rows}
    assert (by_node[20]["attribution"], by_node[20]["module_name"]) == ("graph_capture", "0")
    assert (by_node[21]["attribution"], by_node[21]["module_name"]) == ("graph_capture", "0.inner")
    # node 99 belongs to no observed capture: the replaying launch, and a warning naming the observer
    assert by_node[99]["attribution"] == schema.ATTRIBUTION_GRAPH_LAUNCH
    assert "observe_graph_captures" in metadata[schema.META_GRAPH_CAPTURE]
    assert any("aitune_dispatch.observe_graph_captures" in m for m in messages)
    assert [str(w.message) for w in caught] == list(messages)


@needs_native
def test_a_module_outside_the_profiled_hierarchy_keeps_no_name(fake_capture):
    source = StackSource()
    outer = Outer(source)
    with torch.no_grad(), graph_observer.GraphCaptureObserver(outer, "python", False, source):
        outer(torch.randn(2, 4))
    attributed, _, _ = attribute_later(outer.inner, replay_activity([20, 21]))  # Outer is not profiled now
    by_node = {row["graph_node_id"]: row for row in attributed.activity.to_pylist()}
    assert by_node[21]["module_name"] == ""  # inner is the profiled root
    # node 20 was launched in Outer's scope, outside this hierarchy: it stays on the replaying module
    assert (by_node[20]["attribution"], by_node[20]["module_id"]) == (schema.ATTRIBUTION_GRAPH_CAPTURE, 0)
    assert by_node[21]["module_id"] == 0 and by_node[21]["attribution"] == schema.ATTRIBUTION_GRAPH_CAPTURE


@needs_native
def test_an_observation_is_freed_with_its_graph(fake_capture):
    source = StackSource()
    outer = Outer(source)
    with torch.no_grad(), graph_observer.GraphCaptureObserver(outer, "python", False, source):
        outer(torch.randn(2, 4))
    assert len(graph_observer.observations()) == 1
    outer.graph = None
    gc.collect()
    assert graph_observer.observations() == []
    with pytest.warns(RuntimeWarning, match="observe_graph_captures"):
        attributed, _, _ = attribute_later(outer, replay_activity([20]))
    assert attributed.activity["attribution"].to_pylist() == [schema.ATTRIBUTION_GRAPH_LAUNCH]


@needs_native
def test_captures_inside_profile_are_left_to_it(fake_capture):
    source = StackSource()
    outer = Outer(source)
    with torch.no_grad(), graph_observer.GraphCaptureObserver(outer, "python", False, source) as observer:
        with graph_observer.profile_running():
            outer(torch.randn(2, 4))
    assert (observer.captured, observer.skipped) == (0, 1)
    assert graph_observer.observations() == []


def test_graph_replays_total_each_graph():
    from aitune_dispatch.results import views

    activity = replay_activity([20, 21, 20, 21]).to_pandas()
    activity["attribution"] = activity["attribution"].astype(object)
    activity["correlation_id"] = [50, 50, 51, 51]  # two replays of graph 2
    activity.loc[0:1, "attribution"] = schema.ATTRIBUTION_GRAPH_CAPTURE
    activity.loc[2:3, "attribution"] = schema.ATTRIBUTION_GRAPH_LAUNCH
    eager = activity.iloc[:1].assign(graph_id=0, graph_node_id=0, correlation_id=60)
    table = pa.Table.from_pandas(pd.concat([activity, eager]), schema=schema.ACTIVITY, preserve_index=False)
    result = types.SimpleNamespace(activity=table)
    frame = views.graph_replays(result)
    assert list(frame.columns) == views.GRAPH_REPLAY_COLUMNS
    assert frame.to_dict("records") == [
        {"graph_id": 2, "replays": 2, "kernels": 4, "kernels_per_replay": 2.0, "total_us": 4.0, "share": 0.8,
         "attributed": 0.5}
    ]
    assert views.graph_replays(types.SimpleNamespace(activity=table.slice(4))).empty


@needs_native
def test_an_observed_trace_is_built_on_first_use_and_holds_no_module(fake_capture):
    import weakref

    from aitune_dispatch.tracing import native

    try:
        native.load()
    except (ImportError, OSError, RuntimeError) as error:
        pytest.skip(f"the native tracer is not built ({error})")
    uncorrelated = types.SimpleNamespace(correlation_kind=schema.NO_CORRELATION)  # the native tracer pushes nothing
    outer = Outer(StackSource())
    with torch.no_grad(), graph_observer.GraphCaptureObserver(outer, "native", False, uncorrelated) as observer:
        outer(torch.randn(2, 4))
    assert observer.captured == 1
    (observation,) = graph_observer.observations()
    assert "trace" not in vars(observation) and "nodes" not in vars(observation)  # not converted inside the capture
    graph, inner = outer.graph, weakref.ref(outer.inner)
    del outer, observer
    gc.collect()
    assert inner() is None  # what builds the trace later keeps no module alive
    assert graph_observer.observations() == [observation]  # the graph lives, so does its observation
    trace = observation.trace
    assert trace.ops.num_rows > 0 and trace.module_calls.num_rows > 0  # Inner's forward and its ops
    assert observation.trace is trace  # built once
    nodes = observation.nodes
    assert nodes.schema == schema.GRAPH_NODES
    assert sorted(nodes["node_id"].to_pylist()) == [10, 11, 20, 21]  # Outer's and Inner's nodes and their clones
    assert observation.nodes is nodes
    del graph
