"""The CUDA graph observer without a GPU: rows fed through the compiled collector, and its failures in words."""

from __future__ import annotations

import types

import pytest
from fixture_models import StackSource, cupti_native, needs_native

from aitune_dispatch import schema
from aitune_dispatch.provenance.graphs import GraphNodeObserver

pytestmark = pytest.mark.single_backend  # no tracing backend involved



@needs_native
def test_rows_recorded_by_the_callback_come_back_as_a_table():
    cupti_native.graph_observer_take()  # start empty
    base = schema.SCOPE_BASE
    # a capture creates nodes 10 (inside op 4) and 11 (inside scope 2); instantiation clones them
    cupti_native._simulate_graph_node(schema.GRAPH_NODE_CREATED, 1, 10, 4)
    cupti_native._simulate_graph_node(schema.GRAPH_NODE_CREATED, 1, 11, base + 2, node_type=1)
    cupti_native._simulate_graph_node(schema.GRAPH_NODE_CLONED, 2, 20, -1, 1, 10)
    cupti_native._simulate_graph_node(schema.GRAPH_NODE_CLONED, 2, 2**40 + 1, -1, 1, 11)
    observer = GraphNodeObserver(7, cupti_native)
    table = observer.take()
    assert table.schema == schema.GRAPH_NODES
    assert table.to_pydict() == {
        "event": [0, 0, 1, 1],
        "graph_id": [1, 1, 2, 2],
        "node_id": [10, 11, 20, 2**40 + 1],
        "external_id": [4, base + 2, -1, -1],
        "original_graph_id": [0, 0, 1, 1],
        "original_node_id": [0, 0, 10, 11],
        "node_type": [0, 1, 0, 0],
    }
    assert observer.take().num_rows == 0 and observer.lost == 0  # taken: the rows start empty again
    with pytest.raises(ValueError, match="event must be 0 .created. or 1 .cloned.; got 7"):
        cupti_native._simulate_graph_node(7, 1, 1)


def test_without_the_compiled_decoder_it_says_how_to_build_it():
    observer = GraphNodeObserver(7, None)
    assert observer.start() is False
    assert "python setup.py build_ext --inplace" in str(observer.unavailable)
    assert observer.take().num_rows == 0
    observer.stop()  # nothing to undo


def test_another_subscriber_is_named_and_nothing_is_left_subscribed():
    calls: list[str] = []

    def refuse(kind: int) -> None:
        calls.append(f"start {kind}")
        raise RuntimeError("cuptiSubscribe failed with CUPTI error 39 (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)")

    fake = types.SimpleNamespace(graph_observer_start=refuse, graph_observer_stop=lambda: calls.append("stop"))
    observer = GraphNodeObserver(7, fake)
    assert observer.start() is False
    assert "another CUPTI client (torch.profiler's Kineto" in str(observer.unavailable)
    observer.stop()
    observer.stop()
    assert calls == ["start 7"]  # a failed start is never stopped: it subscribed nothing


def test_a_started_observer_unsubscribes_once():
    calls: list[str] = []
    fake = types.SimpleNamespace(
        graph_observer_start=lambda kind: calls.append(f"start {kind}"),
        graph_observer_stop=lambda: calls.append("stop"),
    )
    observer = GraphNodeObserver(3, fake)
    assert observer.start() is True and observer.unavailable is None
    observer.stop()
    observer.stop()
    assert calls == ["start 3", "stop"]


# -- the orchestration, driven without a GPU ---------------------------------------------------------------
@needs_native
def test_a_graph_captured_in_a_traced_warm_up_is_attributed_on_replay(monkeypatch):
    from aitune_dispatch import torch_compat

    if not torch_compat.provenance_tracing_available():
        pytest.skip(f"this torch's Inductor has no {torch_compat.PROVENANCE_HOOK} outside its debug trace")
    import pyarrow as pa
    import torch
    import torch.nn.functional as F
    from torch import nn

    from aitune_dispatch.provenance import capture as provenance_capture
    from aitune_dispatch.tracing import ModuleTracker

    source = StackSource()
    fake = types.SimpleNamespace(
        graph_observer_start=lambda kind: None,
        graph_observer_stop=lambda: None,
        graph_observer_take=cupti_native.graph_observer_take,
    )
    monkeypatch.setattr(provenance_capture, "_native_decoder", lambda: fake)

    class Capturing(nn.Module):
        """Records graph node 10 of graph 1 from inside its forward, as a launch during a capture would."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.relu(self.fc(x))
            cupti_native._simulate_graph_node(schema.GRAPH_NODE_CREATED, 1, 10, source.stack[-1])
            cupti_native._simulate_graph_node(schema.GRAPH_NODE_CLONED, 2, 20, -1, 1, 10)
            return y

    model = Capturing()
    cupti_native.graph_observer_take()
    with torch.no_grad(), provenance_capture.ProvenanceCapture("cuda", source, "python") as capture:
        capture.warm_up(lambda: model(torch.randn(2, 4)), 1, model, ())
        assert source.stack == []  # every push popped
    tracker = ModuleTracker(model)
    activity = pa.table(
        {
            "correlation_id": [50], "kernel": ["gemm"], "kind": ["kernel"], "start_ns": [0], "end_ns": [1000],
            "kernel_us": [1.0], "device": pa.array([0], pa.int32()), "stream": [7],
            "op_id": pa.array([None], pa.int64()),
            "op": pa.array([None], pa.string()), "module_id": [0], "module_name": [""], "call_id": [-1],
            "function_name": pa.array([None], pa.string()), "thread": [0], "graph_id": [2], "graph_node_id": [20],
            "attribution": ["trace"],
        },
        schema=schema.ACTIVITY,
    )
    attributed, metadata, messages = capture.attribute(activity, schema.empty(schema.CALLS), tracker.table(), tracker)
    row = attributed.activity.to_pylist()[0]
    # node 10 was created inside Capturing's forward (its scope: module "", no call); the replayed clone 2/20 is it
    assert (row["attribution"], row["module_name"], row["function_name"]) == ("graph_capture", "", None)
    assert metadata[schema.META_GRAPH_CAPTURE] == "observed" and messages == ()


def test_an_exception_in_a_warm_up_pass_unsubscribes_and_restores_inductor(monkeypatch):
    from aitune_dispatch import torch_compat

    if not torch_compat.provenance_tracing_available():
        pytest.skip(f"this torch's Inductor has no {torch_compat.PROVENANCE_HOOK} outside its debug trace")
    import torch
    import torch._inductor.debug as debug
    from torch import nn

    from aitune_dispatch.provenance import capture as provenance_capture
    from aitune_dispatch.provenance import inductor as compiled

    calls: list[str] = []
    fake = types.SimpleNamespace(
        graph_observer_start=lambda kind: calls.append("start"),
        graph_observer_stop=lambda: calls.append("stop"),
        graph_observer_take=lambda: calls.append("take"),
    )
    monkeypatch.setattr(provenance_capture, "_native_decoder", lambda: fake)
    original = debug.set_kernel_post_grad_provenance_tracing
    model = nn.Linear(2, 2)

    def failing() -> None:
        model(torch.randn(1, 2))
        raise ValueError("the workload failed")

    with pytest.raises(ValueError, match="the workload failed"):
        with provenance_capture.ProvenanceCapture("cuda", StackSource(), "python") as capture:
            assert debug.set_kernel_post_grad_provenance_tracing is not original  # observed while it runs
            capture.warm_up(failing, 2, model, ())
    assert calls == ["start", "stop"]  # subscribed once, unsubscribed once, nothing taken from a failed pass
    assert debug.set_kernel_post_grad_provenance_tracing is original and not compiled._active
