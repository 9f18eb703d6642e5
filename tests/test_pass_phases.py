"""What happens around the recorded pass, in order: a source that starts early starts before the last
warm-up pass, is told when the recorded pass begins, and is stopped whatever happens."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, capture
from aitune_dispatch.collection import CpuOpTimer


class _EarlySource(CpuOpTimer):
    """The CPU source, starting early like CUPTI's, logging what the capture asks of it."""

    starts_early = True

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def start(self) -> None:
        self.log.append("start")
        super().start()

    def begin_pass(self) -> None:
        self.log.append("begin_pass")

    def stop(self) -> None:
        if self.collecting:
            self.log.append("stop")
        super().stop()


@pytest.fixture
def early(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    log: list[str] = []
    monkeypatch.setattr(capture, "make_source", lambda config: _EarlySource(log))
    return log


def _profile(log: list[str], warmup: int, fail_on_call: int | None = None) -> None:
    model = nn.Linear(4, 4)
    calls = 0

    def function() -> None:
        nonlocal calls
        calls += 1
        log.append("call")
        if calls == fail_on_call:
            raise KeyError("the profiled function failed")
        model(torch.ones(1, 4))

    ModuleFunctionKernelProfiler(device="cpu").profile(function, module=model, warmup_iterations=warmup)


@pytest.mark.parametrize("warmup", [0, 1, 3])
def test_a_source_that_starts_early_starts_before_the_last_warm_up_pass(early, warmup):
    _profile(early, warmup)
    # warm-up passes before the last run before collection; 0 warm-up passes: it starts for the pass
    expected = ["call"] * max(warmup - 1, 0) + ["start"] + ["call"] * min(warmup, 1) + ["begin_pass", "call", "stop"]
    assert early == expected


def test_a_warm_up_pass_that_fails_after_the_early_start_leaves_nothing_collecting(early):
    with pytest.raises(KeyError):
        _profile(early, warmup=2, fail_on_call=2)  # the last warm-up pass, the source started
    assert early == ["call", "start", "call", "stop"]


def test_the_cpu_source_starts_with_the_recorded_pass(monkeypatch):
    log: list[str] = []
    started = CpuOpTimer.start

    def start(self: CpuOpTimer) -> None:
        log.append("start")
        started(self)

    monkeypatch.setattr(CpuOpTimer, "start", start)
    _profile(log, warmup=2)
    assert log == ["call", "call", "start", "call"]  # its rows are the recorded pass's ops: nothing earlier
