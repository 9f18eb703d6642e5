"""What happens around the recorded pass, in order: the activity source starts after the warm-up passes,
so that its rows are the recorded pass's alone."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.collection import CpuOpTimer


def _profile(log: list[str], warmup: int) -> None:
    model = nn.Linear(4, 4)

    def function() -> None:
        log.append("call")
        model(torch.ones(1, 4))

    ModuleFunctionKernelProfiler(device="cpu").profile(function, module=model, warmup_iterations=warmup)


@pytest.mark.parametrize("warmup", [0, 2])
def test_the_source_starts_with_the_recorded_pass(monkeypatch, warmup):
    log: list[str] = []
    started, stopped = CpuOpTimer.start, CpuOpTimer.stop

    def start(self: CpuOpTimer) -> None:
        log.append("start")
        started(self)

    def stop(self: CpuOpTimer) -> None:
        log.append("stop")
        stopped(self)

    monkeypatch.setattr(CpuOpTimer, "start", start)
    monkeypatch.setattr(CpuOpTimer, "stop", stop)
    _profile(log, warmup)
    assert log == ["call"] * warmup + ["start", "call", "stop"]
