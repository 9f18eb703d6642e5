"""device="cpu" and torch.profiler: never at the same time (its callbacks would be timed as our ops)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity

from aitune_dispatch.collection import CpuOpTimer


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()


def test_profile_refuses_to_start_while_torch_profiler_collects(cpu_profiler):
    net = model()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]):
        with pytest.raises(RuntimeError, match="torch.profiler is collecting.*one after the other"):
            cpu_profiler.profile(net, [((torch.randn(2, 8),), {})], warmup_iterations=0)
    # nothing was left behind: the next run works
    profiling_df, _ = cpu_profiler.profile(net, [((torch.randn(2, 8),), {})], warmup_iterations=0)
    assert {"linear", "relu"} <= set(profiling_df["function_name"])


def test_torch_profiler_started_during_the_pass_fails_the_run(cpu_profiler):
    net = model()
    started: list[torch.profiler.profile] = []

    def starts_a_profiler(x: torch.Tensor) -> torch.Tensor:
        out = net(x)
        if not started:
            started.append(torch.profiler.profile(activities=[ProfilerActivity.CPU]))
            started[0].start()
        return net(out)

    try:
        with pytest.raises(RuntimeError, match="torch.profiler was started while profile"):
            cpu_profiler.profile(starts_a_profiler, [((torch.randn(2, 8),), {})], module=net, warmup_iterations=0)
    finally:
        for profiler in started:
            profiler.stop()
    assert started


@pytest.mark.single_backend
def test_the_cpu_source_checks_at_start_and_at_stop():
    """Outside profile() too: the source itself refuses, and its stop() tells."""
    source = CpuOpTimer()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]):
        with pytest.raises(RuntimeError, match="torch.profiler is collecting"):
            source.start()
    source = CpuOpTimer()
    source.start()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]):
        with pytest.raises(RuntimeError, match="torch.profiler was started"):
            source.stop()
    source.stop()  # idempotent, and torch.profiler has stopped: nothing more to say
