"""What happens around the recorded pass, in order: the activity source starts after the warm-up passes,
so that its rows are the recorded pass's alone."""

from __future__ import annotations

import collections
import inspect
import os
import sys
import types

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


# what the pass window may run once however many samples it holds: the pass's own frame, and the
# first sight of a name (strings interned, op names cached) that every later event of it reuses
_ONCE_PER_PASS = {"run_pass", "PhaseClock.reporter", "_recording"}  # _recording: its generator resumes at the end
_FIRST_SIGHT = {"_Interner.id", "op_name"}


def _qualname(frame: types.FrameType) -> str:
    """The qualified name of the function ``frame`` runs: ``code.co_qualname`` (Python >= 3.11); on 3.10,
    for a method, the class in the MRO of ``self`` or ``cls`` that defines it, joined to ``co_name``."""
    code = frame.f_code
    qualname = getattr(code, "co_qualname", None)
    if qualname is not None:
        return qualname
    owner = frame.f_locals.get("self", frame.f_locals.get("cls"))
    for klass in (owner if isinstance(owner, type) else type(owner)).__mro__ if owner is not None else ():
        defined = klass.__dict__.get(code.co_name)
        function = inspect.unwrap(getattr(defined, "__func__", defined))
        if getattr(function, "__code__", None) is code:
            return f"{klass.__qualname__}.{code.co_name}"
    return code.co_name


def _calls_inside_the_pass(samples: int) -> collections.Counter:
    """How often each function of the package ran between the end of the start phase and the pass's lap."""
    import torch.nn.functional as F

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(F.relu(self.a(x)))

    seen: collections.Counter = collections.Counter()
    inside = [False]

    def observe(frame: types.FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if code.co_name == "lap" and code.co_filename.endswith(os.path.join("aitune_dispatch", "capture.py")):
            phase = frame.f_locals.get("phase")
            if event == "return" and phase == "start":
                inside[0] = True
            elif event == "call" and phase == "pass":
                inside[0] = False
        if inside[0] and event == "call" and f"{os.sep}aitune_dispatch{os.sep}" in code.co_filename:
            seen[_qualname(frame)] += 1

    model = Two().eval()
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    sys.setprofile(observe)
    try:
        profiler.profile(model, [((torch.randn(2, 4),), {})] * samples, warmup_iterations=1)
    finally:
        sys.setprofile(None)
    return seen


def test_the_recorded_pass_holds_the_users_calls_and_per_event_work_only():
    # per profile() work (installing, starting, refreshing, reading threads) belongs before or after the
    # timed pass: inside it, every function of ours runs a number of times linear in the samples (k per
    # sample), and only the pass's own frame and first sights run a fixed number of times
    one, two, three = (_calls_inside_the_pass(n) for n in (1, 2, 3))
    assert one, "the pass window was not found (PhaseClock.lap's phases renamed?)"
    for name in set(one) | set(two) | set(three):
        per_sample = two[name] - one[name]
        fixed = one[name] - per_sample
        assert three[name] == one[name] + 2 * per_sample, (name, one[name], two[name], three[name])
        assert fixed == 0 or name in _ONCE_PER_PASS | _FIRST_SIGHT, (name, fixed)
    assert one["_pre_hook"] == one["_post_hook"] == 3  # the module hooks: root, a and b, once each per sample
