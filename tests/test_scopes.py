"""Scope contexts: every module forward and functional call pushes one, and pops it, in LIFO order."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import encoded
from aitune_dispatch.tracing import ModuleTracker, TraceSession, make_tracer, native


class ScopeLog:
    """An activity source double that checks push/pop balance like CUPTI's per-thread stack.

    The native backend pushes in C++; with ``LOG_PUSHES`` it logs them, and the log is replayed here.
    """

    correlation_kind = native.LOG_PUSHES

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.pushed: list[int] = []
        self.ops: list[int] = []  # op ids pushed

    def op_started(self, op_id: int, op: str) -> None:
        self.ops.append(op_id)

    def op_finished(self, op_id: int) -> None:
        pass

    def scope_entered(self, context_id: int) -> None:
        self.stack.append(context_id)
        self.pushed.append(context_id)

    def scope_exited(self) -> None:
        self.stack.pop()

    def replay(self, pushes: list[int]) -> None:
        """Replay the native backend's log: op ids are pushed too, scopes above SCOPE_BASE."""
        ops: list[int] = []
        for pushed in pushes:
            if pushed == -1:
                if ops and ops[-1] == len(self.stack):
                    ops.pop()
                else:
                    self.scope_exited()
            elif pushed >= native.SCOPE_BASE:
                self.scope_entered(pushed - native.SCOPE_BASE)
            else:
                ops.append(len(self.stack))
                self.ops.append(pushed)
        assert not ops


class Net(nn.Module):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.fail = fail

    def forward(self, x):
        y = F.relu(self.fc(x))
        if self.fail:
            raise ValueError("boom")
        return y


@pytest.mark.parametrize("fail", [False, True])
def test_scopes_balance_and_name_their_context(fail, tracing_backend):
    log = ScopeLog()
    net = Net(fail)
    modules = ModuleTracker(net)
    session = TraceSession(modules, make_tracer(tracing_backend, modules.module_ids(), None, log, False))
    with pytest.raises(ValueError) if fail else torch.no_grad():
        with session:
            net(torch.randn(2, 4))
    if tracing_backend == "native":
        log.replay(session.tracer.push_log())
    assert log.stack == []
    contexts = session.tables().contexts.to_pylist()
    modules = session.modules.names
    calls = session.tables().calls.column("function_name").to_pylist()
    labels = [
        (modules[c["module_id"]] if c["module_id"] >= 0 else None, calls[c["call_id"]] if c["call_id"] >= 0 else None)
        for c in contexts
    ]
    # root forward, fc forward, linear inside fc, relu inside the root
    assert labels == [("", None), ("fc", None), ("fc", "linear"), ("", "relu")]
    assert log.pushed == [0, 1, 2, 3]


class Views(nn.Module):
    def forward(self, x):
        y = x.view(-1).t() if x.dim() == 1 else x.view(-1)
        return torch.relu(y.unsqueeze(0)) + 1


def test_view_ops_are_recorded_but_push_no_correlation_id(tracing_backend):
    # views only compute metadata and never launch, so an id pushed for them would tag nothing
    log = ScopeLog()
    net = Views()
    modules = ModuleTracker(net)
    session = TraceSession(modules, make_tracer(tracing_backend, modules.module_ids(), None, log, False))
    x = torch.randn(2, 3)
    with torch.no_grad(), session:
        net(x)
    if tracing_backend == "native":
        log.replay(session.tracer.push_log())
    tables = session.tables()
    ops = encoded.decoded(tables.ops).to_pandas()
    views = {"aten::view", "aten::unsqueeze"}
    assert views <= set(ops.op)  # recorded
    assert sorted(log.ops) == sorted(ops.op_id[~ops.op.isin(views)])  # relu and add pushed, views not
    assert tables.ops_pushed == len(log.ops) == 2
