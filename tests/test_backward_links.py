"""Backward and optimizer attribution (``tracing/links.py``): an op autograd runs in backward gets the module
and functional call of the forward op that created its node, the ops of an optimizer's ``step()`` and
``zero_grad()`` a call named for it; what cannot be linked stays in the result with no module. Both tracing
backends, on the CPU activity source (each aten op is a row)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
from torch import nn

import aitune_dispatch
from aitune_dispatch import encoded, schema
from aitune_dispatch.tracing.contract import TraceTables
from aitune_dispatch.tracing.links import linked

FIELDS = ["op", "module_name", "function_name", "attribution"]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def _rows(result) -> list[tuple]:  # noqa: ANN001
    table = encoded.decoded(result.activity.select(FIELDS))
    return [tuple(row[name] for name in FIELDS) for row in table.to_pylist()]


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    F.mse_loss(model(x), torch.zeros(x.shape[0], 4)).backward()
    optimizer.step()
    optimizer.zero_grad()


def _recorded_step(op_tracer: str, **optimizer_options) -> tuple[aitune_dispatch.ProfileResult, nn.Module]:  # noqa: ANN003
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **optimizer_options)
    x = torch.randn(8, 16)
    _train_step(model, optimizer, x)  # warm: the optimizer's state exists
    with aitune_dispatch.recording(model, device="cpu", op_tracer=op_tracer) as rec:
        _train_step(model, optimizer, x)
    return rec.result, model


def test_backward_ops_get_the_module_and_call_of_the_forward_op_that_created_their_node(op_tracer):
    result, _ = _recorded_step(op_tracer, foreach=True)
    rows = _rows(result)
    backward = [row for row in rows if row[3] == schema.ATTRIBUTION_BACKWARD]
    # each layer's weight gradient (aten::mm) goes to that layer's linear, gelu's to the gelu call
    assert ("aten::mm", "fc1", "linear", "backward") in backward
    assert ("aten::mm", "fc2", "linear", "backward") in backward
    assert ("aten::gelu_backward", "", "gelu", "backward") in backward
    assert ("aten::mse_loss_backward", None, "mse_loss", "backward") in backward
    # the bias gradients, reduced to the bias's shape after the node's apply, in the same node
    assert ("aten::sum", "fc1", "linear", "backward") in backward
    assert ("aten::sum", "fc2", "linear", "backward") in backward
    # no forward op is taken for a backward one, and a linked op's call is one of the forward's calls
    forward_ops = {row[0] for row in rows if row[3] == schema.ATTRIBUTION_TRACE}
    assert "aten::gelu_backward" not in forward_ops and "aten::mm" not in forward_ops
    calls = encoded.decoded(result.calls).to_pandas().set_index("call_id")
    activity = result.activity.to_pandas()
    linked_calls = activity.loc[activity["attribution"] == "backward", "call_id"]
    assert set(linked_calls[linked_calls >= 0]) <= set(calls.index)
    assert (calls.loc[sorted(set(linked_calls[linked_calls >= 0])), "end_ns"] < activity["start_ns"].max()).all()
    # the spec's rows keep every linked backward row: a module and a call enclose it
    frame = result.profiling_df()
    assert {"aten::mm", "aten::gelu_backward"} <= set(frame["op"])


def test_the_optimizer_steps_ops_go_to_a_call_named_for_it(op_tracer):
    result, _ = _recorded_step(op_tracer, foreach=True)
    rows = _rows(result)
    optimizer = [row for row in rows if row[3] == schema.ATTRIBUTION_OPTIMIZER]
    assert {row[2] for row in optimizer} == {"AdamW.step"}  # zero_grad() set the grads to None: no op
    assert {"aten::_foreach_lerp_", "aten::_foreach_addcdiv_"} <= {row[0] for row in optimizer}
    assert all(row[1] is None for row in optimizer)  # the optimizer is no module
    names = encoded.objects(result.calls["function_name"]).tolist()
    assert names.count("AdamW.step") == 1 and names.count("AdamW.zero_grad") == 1
    assert not [row for row in rows if row[0].startswith("aten::_foreach") and row[3] != "optimizer"]


def test_zero_grad_that_writes_zeros_is_its_own_call(op_tracer):
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    with aitune_dispatch.recording(model, device="cpu", op_tracer=op_tracer) as rec:
        F.mse_loss(model(x), torch.zeros(8, 4)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
    rows = _rows(rec.result)
    zeroing = {row[0] for row in rows if row[2] == "SGD.zero_grad"}
    assert zeroing and all(row[3] == "optimizer" for row in rows if row[2] in ("SGD.step", "SGD.zero_grad"))
    assert "aten::zero_" in zeroing


def test_a_custom_autograd_functions_backward_goes_to_the_module_it_ran_in(op_tracer):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # noqa: ANN001, ANN205
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):  # noqa: ANN001, ANN205
            (x,) = ctx.saved_tensors
            return grad * 2 * x

    class Block(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Square.apply(x)

    model = nn.Sequential(nn.Linear(4, 4), Block())
    x = torch.randn(2, 4)
    with aitune_dispatch.recording(model, device="cpu", op_tracer=op_tracer) as rec:
        model(x).sum().backward()
    backward = [row for row in _rows(rec.result) if row[3] == "backward"]
    # the node torch creates before the Function's forward runs goes with the first op of that forward
    assert ("aten::mul", "1", None, "backward") in backward
    assert ("aten::mm", "0", "linear", "backward") in backward


def test_a_graph_built_before_the_region_runs_its_backward_unlinked(op_tracer):
    model = MLP()
    loss = F.mse_loss(model(torch.randn(8, 16)), torch.zeros(8, 4))  # nodes created outside the region
    with aitune_dispatch.recording(model, device="cpu", op_tracer=op_tracer) as rec:
        loss.backward()
    rows = _rows(rec.result)
    assert rows and all(row[3] == "backward" for row in rows if row[0] != "aten::ones_like")
    assert all(row[1] is None and row[2] is None for row in rows)  # nothing to link them to: kept, no module


def test_an_inference_pass_links_nothing(cpu_profiler):
    model = MLP()
    cpu_profiler.profile(model, [((torch.randn(8, 16),), {})], warmup_iterations=1)
    result = cpu_profiler.last_result
    assert set(encoded.objects(result.activity["attribution"])) == {"trace"}
    with aitune_dispatch.recording(model, device="cpu") as rec:  # grad on, no backward
        model(torch.randn(8, 16))
    assert set(encoded.objects(rec.result.activity["attribution"])) == {"trace"}


def test_linked_rows_survive_a_save(op_tracer, tmp_path):
    result, _ = _recorded_step(op_tracer, foreach=True)
    path = tmp_path / "step"
    result.save(path)
    loaded = aitune_dispatch.ProfileResult.load(path)
    assert _rows(loaded) == _rows(result)
    assert (
        encoded.objects(loaded.calls["function_name"]).tolist()
        == encoded.objects(result.calls["function_name"]).tolist()
    )


def test_steps_of_a_training_loop_each_have_their_backward_and_optimizer(op_tracer):
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.randn(8, 16)
    with aitune_dispatch.recording(model, device="cpu", op_tracer=op_tracer, wait=1, active=3) as rec:
        for _ in range(4):
            _train_step(model, optimizer, x)
            rec.step()
    steps = rec.result.steps(by="function_name").set_index("function_name")
    assert steps.loc["AdamW.step", "steps"] == 3
    assert steps.loc["linear", "steps"] == 3
    names = encoded.objects(rec.result.calls["function_name"]).tolist()
    assert names.count("AdamW.step") == 3


# -- the linking rules on hand-made tables ------------------------------------------------------------
def _ops(threads: list[int], starts: list[int], modules: list[int], calls: list[int]) -> pa.Table:
    n = len(threads)
    return pa.table(
        {
            "op_id": np.arange(n),
            "op": encoded.of_values([f"aten::op{i}" for i in range(n)]),
            "module_id": modules,
            "call_id": calls,
            "thread": threads,
            "start_ns": starts,
            "end_ns": [start + 1 for start in starts],
        },
        schema=schema.OPS,
    )


def _trace(ops: pa.Table, nodes=(), backward=(), scopes=()) -> TraceTables:  # noqa: ANN001
    calls = schema.empty(schema.CALLS)
    return TraceTables(
        ops,
        encoded.encoded(calls),
        schema.empty(schema.MODULE_CALLS),
        schema.empty(schema.CONTEXTS),
        threads=(),
        scopes_pushed=0,
        ops_pushed=0,
        autograd_nodes=pa.Table.from_pylist(
            [dict(zip(schema.AUTOGRAD_NODES.names, n)) for n in nodes], schema.AUTOGRAD_NODES
        ),
        backward_ops=pa.Table.from_pylist(
            [dict(zip(schema.BACKWARD_OPS.names, b)) for b in backward], schema.BACKWARD_OPS
        ),
        user_scopes=pa.Table.from_pylist([dict(zip(schema.USER_SCOPES.names, s)) for s in scopes], schema.USER_SCOPES),
    )


def test_a_node_is_linked_on_its_thread_by_its_number():
    # ops 0 and 1 forward on threads 0 and 1 both created their thread's node 5; ops 2..4 ran in backward
    ops = _ops([0, 1, 2, 2, 2], [0, 1, 10, 11, 12], [3, 4, -1, -1, -1], [7, 8, -1, -1, -1])
    trace = _trace(
        ops,
        nodes=[(0, 0, 5, 6), (1, 1, 4, 6)],
        backward=[(2, 5, 0), (3, 5, 1), (4, -1, 0)],
    )
    links = linked(trace).links.to_pylist()
    assert links == [
        {"op_id": 2, "module_id": 3, "call_id": 7, "attribution": "backward"},
        {"op_id": 3, "module_id": 4, "call_id": 8, "attribution": "backward"},
        {"op_id": 4, "module_id": -1, "call_id": -1, "attribution": "backward"},  # AccumulateGrad: no node number
    ]


def test_an_unknown_forward_thread_is_the_profiling_thread_and_the_first_claim_wins():
    ops = _ops([0, 0, 1], [0, 1, 10], [3, 4, -1], [7, 8, -1])
    trace = _trace(ops, nodes=[(0, 0, 2, 3), (1, 0, 2, 3)], backward=[(2, 2, -1)])
    assert linked(trace).links.to_pylist() == [{"op_id": 2, "module_id": 3, "call_id": 7, "attribution": "backward"}]


def test_an_optimizer_scope_takes_the_ops_that_began_inside_it_on_its_thread():
    ops = _ops([0, 0, 1, 0, 0], [5, 15, 16, 25, 40], [-1] * 5, [-1] * 5)
    trace = _trace(
        ops, scopes=[("Optimizer.step#SGD.step", 0, 10, 30), ("Optimizer.zero_grad#SGD.zero_grad", 0, 35, 45)]
    )
    result = linked(trace)
    names = encoded.objects(result.calls["function_name"]).tolist()
    assert names == ["SGD.step", "SGD.zero_grad"]
    assert result.calls["call_id"].to_pylist() == [0, 1]
    links = {row["op_id"]: row["call_id"] for row in result.links.to_pylist()}
    assert links == {1: 0, 3: 0, 4: 1}  # op 2 ran on another thread, op 0 before the scope


def test_a_trace_with_nothing_to_link_is_returned_as_it_is():
    trace = _trace(_ops([0], [0], [0], [0]), nodes=[(0, 0, 0, 1)])
    assert linked(trace) is trace
