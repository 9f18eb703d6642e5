"""Nothing installed for profiling outlives profile(), also when inference raises."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_globals
from torch.utils._python_dispatch import _get_current_dispatch_mode

from aitune_dispatch import ModuleFunctionKernelProfiler


def global_state() -> dict:
    return {
        "pre_hooks": dict(module_globals._global_forward_pre_hooks),
        "hooks": dict(module_globals._global_forward_hooks),
        "module_call": nn.Module.__dict__["__call__"],
        "function_modes": torch._C._len_torch_function_stack(),
        # DisableTorchFunction left entered: every later mode and __torch_function__ unseen
        "torch_function_state": torch._C._get_torch_function_state(),
        "dispatch_mode": _get_current_dispatch_mode(),
        "functional": {name: value for name, value in vars(F).items()},
        # the gates that fast paths read are replaced for the pass only
        "gates": {name: value for name, value in vars(torch.overrides).items() if name.startswith("has_torch")},
    }


def module_state(model: nn.Module) -> list:
    # the test's own bookkeeping attributes are not profiler state
    return [
        (name, {k: v for k, v in m.__dict__.items() if k not in ("calls", "error")})
        for name, m in model.named_modules()
    ]


class Boom(nn.Module):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)  # its fast path reads a gate
        self.linear = nn.Linear(8, 8)
        self.error = error
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        x = self.attn(x, x, x)[0]
        x = self.linear(x)
        if self.calls > 1:  # warmup passes succeed, the recorded pass raises inside a module
            raise self.error
        return x


@pytest.mark.parametrize("error", [ValueError("inference failed"), KeyboardInterrupt()])
def test_everything_is_removed_when_inference_raises(error):
    model = Boom(error).eval()
    before_global, before_modules = global_state(), module_state(model)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with pytest.raises(type(error)):
        profiler.profile(model, [((torch.randn(2, 3, 8),), {})], warmup_iterations=1)
    assert global_state() == before_global
    assert module_state(model) == before_modules
    assert "forward" not in model.attn.__dict__
    # and the next profile works
    model.error = None
    model.calls = -100
    profiling_df, _ = profiler.profile(model, [((torch.randn(2, 3, 8),), {})], warmup_iterations=0)
    assert "linear" in set(profiling_df["function_name"])
    assert global_state() == before_global and module_state(model) == before_modules


def test_everything_is_removed_after_a_normal_run():
    model = nn.Sequential(nn.Linear(4, 4), nn.TransformerEncoderLayer(4, 2, 8, batch_first=True)).eval()
    before_global, before_modules = global_state(), module_state(model)
    ModuleFunctionKernelProfiler(device="cpu").profile(model, [((torch.randn(1, 2, 4),), {})])
    assert global_state() == before_global
    assert module_state(model) == before_modules


def test_user_hooks_and_bound_forwards_survive():
    model = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    seen = []
    handle = model.register_forward_hook(lambda m, a, o: seen.append(1))
    own_forward = model.forward
    model.forward = own_forward  # an instance-level forward of the user's
    try:
        x = torch.randn(1, 2, 8)
        ModuleFunctionKernelProfiler(device="cpu").profile(model, [((x, x, x), {})], warmup_iterations=1)
        assert model.__dict__["forward"] is own_forward
        assert len(seen) == 2  # warmup + recorded pass
        assert list(model._forward_hooks) == [handle.id]
    finally:
        handle.remove()
