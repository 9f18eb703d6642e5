"""Profiling never changes what runs: fast paths gated on ``has_torch_function`` stay on.

``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer`` and ``nn.TransformerEncoder`` read
``torch.overrides.has_torch_function`` in their forward; any torch-function mode makes it true and
switches them to the slow path. Wherever their forward code runs (through the class, an instance
wrapper such as accelerate's, a bound method captured before ``profile()``, ``super()`` from a
subclass), the gate must answer as it would without our mode, the user's wrapper must still run,
and the output must be the output of the unprofiled call. CPU tests compare aten-op multisets with
an uninstrumented pass (both op tracers); the ``gpu`` tests compare kernel multisets with a bare
CUPTI capture.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import BaseTorchFunctionMode

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.tracing.gates import ModeBlindGates

GATES = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")
FUSED = {"aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd"}
# under a dispatch mode aten::reshape dispatches aten::view (see test_native_tracer.py)
UNDER_DISPATCH_MODE = {"aten::_reshape_alias": "aten::view"}


def add_accelerate_style_hook(module: nn.Module, scale: float) -> list[int]:
    """Replace ``module.forward`` on the instance the way accelerate's ``add_hook_to_module`` does.

    The wrapper calls the bound forward captured here and scales its output, so a pass that skips
    the wrapper returns another output. Returns the list the wrapper appends to on every call.
    """
    calls: list[int] = []
    module._old_forward = module.forward

    def new_forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        output = module._old_forward(*args, **kwargs)
        return (output[0] * scale, *output[1:]) if isinstance(output, tuple) else output * scale

    module.forward = functools.update_wrapper(functools.partial(new_forward, module), module._old_forward)
    return calls


class SubclassedLayer(nn.TransformerEncoderLayer):
    def forward(self, src: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return super().forward(src, *args, **kwargs) + 1


class SubclassedAttention(nn.MultiheadAttention):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kwargs: Any) -> Any:
        return super().forward(query, key, value, **kwargs)


@dataclass
class Case:
    """``run(*args)`` is what the user calls; ``module`` is the hierarchy to observe."""

    module: nn.Module
    run: Callable[..., Any]
    args: tuple[Any, ...]
    wrapper_calls: list[int] | None = None


def _mha(device: str) -> nn.MultiheadAttention:
    return nn.MultiheadAttention(16, 2, batch_first=True).eval().to(device)


def _layer(device: str) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval().to(device)


def wrapped_attention(device: str) -> Case:
    mha = _mha(device)
    calls = add_accelerate_style_hook(mha, 2.0)
    x = torch.randn(2, 5, 16, device=device)
    return Case(mha, mha, (x, x, x), calls)


def wrapped_encoder_layer(device: str) -> Case:
    layer = _layer(device)
    calls = add_accelerate_style_hook(layer, 3.0)
    return Case(layer, layer, (torch.randn(2, 5, 16, device=device),), calls)


def wrapped_encoder(device: str) -> Case:
    encoder = nn.TransformerEncoder(_layer(device), 2, enable_nested_tensor=False).eval()
    calls = add_accelerate_style_hook(encoder, 0.5)
    for layer in encoder.layers:
        add_accelerate_style_hook(layer, 2.0)
    return Case(encoder, encoder, (torch.randn(2, 5, 16, device=device),), calls)


class CallsCapturedForward(nn.Module):
    def __init__(self, attention: nn.MultiheadAttention) -> None:
        super().__init__()
        self.attention = attention
        self.captured = attention.forward  # a bound method captured before profile()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        return self.captured(q, k, v)


def captured_bound_forward(device: str) -> Case:
    holder = CallsCapturedForward(_mha(device))
    x = torch.randn(2, 5, 16, device=device)
    return Case(holder, holder, (x, x, x))


def subclassed_encoder_layer(device: str) -> Case:
    layer = SubclassedLayer(16, 2, 32, batch_first=True).eval().to(device)
    return Case(layer, layer, (torch.randn(2, 5, 16, device=device),))


def subclassed_attention(device: str) -> Case:
    mha = SubclassedAttention(16, 2, batch_first=True).eval().to(device)
    x = torch.randn(2, 5, 16, device=device)
    return Case(mha, mha, (x, x, x))


CASES = {
    f.__name__: f
    for f in (
        wrapped_attention,
        wrapped_encoder_layer,
        wrapped_encoder,
        captured_bound_forward,
        subclassed_encoder_layer,
        subclassed_attention,
    )
}


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _profile(case: Case, device: str, op_tracer: str | None = None) -> tuple[Any, torch.Tensor]:
    outputs: list[torch.Tensor] = []

    def inference(*args: Any) -> None:
        outputs.append(_first(case.run(*args)))

    profiler = ModuleFunctionKernelProfiler(device=device, op_tracer=op_tracer)
    profiler.profile(inference, [(case.args, {})], module=case.module, warmup_iterations=0)
    return profiler.last_result, outputs[-1]


def _profiled_ops(result: Any) -> collections.Counter[str]:
    return collections.Counter(UNDER_DISPATCH_MODE.get(op, op) for op in result.ops.column("op").to_pylist())


@pytest.mark.parametrize("name", list(CASES))
def test_fast_path_and_user_code_run_as_without_the_profiler(name, op_tracer, bare_ops):
    case = CASES[name]("cpu")
    expected_ops = bare_ops(case.run, *case.args)
    with torch.no_grad():
        expected_output = _first(case.run(*case.args))
    assert expected_ops.keys() & FUSED  # the bare pass takes a fast path: the test means something
    wrapper = case.module.__dict__.get("forward")
    calls_before = len(case.wrapper_calls) if case.wrapper_calls is not None else None

    result, output = _profile(case, "cpu", op_tracer)

    assert _profiled_ops(result) == expected_ops
    assert torch.equal(output, expected_output)  # a skipped wrapper would change the output
    if case.wrapper_calls is not None:
        assert len(case.wrapper_calls) == calls_before + 1  # the user's wrapper ran in the recorded pass
    assert case.module.__dict__.get("forward") is wrapper  # nothing set on (or removed from) the instance


def test_other_modes_still_close_the_fast_path(op_tracer, bare_ops):
    # a user's own torch-function mode switches the fast path off without the profiler: also with it
    case = wrapped_attention("cpu")
    with BaseTorchFunctionMode():
        expected_ops = bare_ops(case.run, *case.args)
        result, _ = _profile(case, "cpu", op_tracer)
    assert not expected_ops.keys() & FUSED
    assert not _profiled_ops(result).keys() & FUSED
    assert "multi_head_attention_forward" in result.calls.column("function_name").to_pylist()  # the slow path


class _Subclass(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        return super().__torch_function__(func, types, args, kwargs or {})


def _answers(*args: Any) -> tuple[bool, bool, bool]:
    overrides = torch.overrides
    return (
        overrides.has_torch_function(args),
        overrides.has_torch_function_unary(args[0]),
        overrides.has_torch_function_variadic(*args),
    )


def _stack() -> list[Any]:
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def test_gates_answer_as_without_our_mode():
    plain, sub = torch.ones(2), torch.ones(2).as_subclass(_Subclass)
    ours, theirs = BaseTorchFunctionMode(), BaseTorchFunctionMode()
    originals = {name: getattr(torch.overrides, name) for name in GATES}
    with ours, ModeBlindGates(ours):
        assert _answers(plain, plain) == (False, False, False)  # the real gates say True here
        assert _answers(sub, plain) == (True, True, True)  # subclasses still count
        with torch._C.DisableTorchFunctionSubclass():
            assert _answers(sub, plain) == (False, False, False)  # as the real gates answer
        with theirs:  # another mode, above ours
            assert _answers(plain, plain) == (True, True, True)
            assert _stack() == [ours, theirs]  # the stack is as it was after each answer
        assert _stack() == [ours]
    assert {name: getattr(torch.overrides, name) for name in GATES} == originals
    with theirs, ours, ModeBlindGates(ours):  # another mode, below ours
        assert _answers(plain, plain) == (True, True, True)
        assert _stack() == [theirs, ours]


def test_gates_ask_what_was_there_and_put_it_back(monkeypatch):
    asked: list[Any] = []

    def users_gate(args: Any) -> bool:
        asked.append(args)
        return False

    monkeypatch.setattr(torch.overrides, "has_torch_function", users_gate)
    ours = BaseTorchFunctionMode()
    with pytest.raises(KeyboardInterrupt), ours, ModeBlindGates(ours):
        assert torch.overrides.has_torch_function((1,)) is False
        assert asked == [(1,)]
        raise KeyboardInterrupt
    assert torch.overrides.has_torch_function is users_gate
    assert torch.overrides.has_torch_function_unary is torch._C._has_torch_function_unary


# -- GPU: kernel multisets equal a bare CUPTI capture ------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_gpu_kernels_equal_a_bare_capture(name, bare_kernels):
    case = CASES[name]("cuda")
    with torch.no_grad():
        case.run(*case.args)  # lazily initialised kernels run before either capture
        expected_output = _first(case.run(*case.args))
    expected = bare_kernels(case.run, [(case.args, {})])
    result, output = _profile(case, "cuda")
    assert collections.Counter(result.activity.column("kernel").to_pylist()) == expected
    assert sum(expected.values()) > 0
    assert set(result.ops.column("op").to_pylist()) & FUSED
    torch.testing.assert_close(output, expected_output)  # a skipped wrapper would scale it by 0.5-3
