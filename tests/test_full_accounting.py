"""Full accounting beyond the spec: coverage, unattributed kernels, and opt-in functions="all"."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler


class RawOps(nn.Module):
    """A GPT-2 style Conv1D: torch.addmm and Tensor operators, then one functional call."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8))
        self.bias = nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.bias, x, self.weight)
        return F.relu(y + x * 2)


def test_default_reports_only_functional_rows_and_keeps_the_rest():
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    profiling_df, _ = profiler.profile(RawOps(), [((torch.randn(4, 8),), {})], warmup_iterations=0)
    result = profiler.last_result
    assert profiling_df["op"].tolist() == ["aten::relu"]
    unattributed = result.unattributed()
    assert unattributed["op"].tolist() == ["aten::addmm", "aten::mul", "aten::add"]
    assert set(unattributed["module_name"]) == {""}  # launched inside the root module
    # coverage is attributed time over all time: relu's share
    relu_us = profiling_df["kernel_us"].sum()
    assert result.coverage == pytest.approx(relu_us / result.total_us)
    assert 0 < result.coverage < 1


def test_functions_all_attributes_raw_torch_calls():
    profiler = ModuleFunctionKernelProfiler(device="cpu", functions="all", function_names={"torch.addmm", "relu"})
    profiling_df, function_data = profiler.profile(RawOps(), [((torch.randn(4, 8),), {})], warmup_iterations=0)
    assert profiling_df["function_name"].tolist() == ["torch.addmm", "torch.Tensor.mul", "torch.Tensor.add", "relu"]
    assert profiler.last_result.coverage == 1.0
    # torch-level calls collect samples only when named; functionals follow function_names as usual
    assert set(function_data) == {"torch.addmm", "relu"}


def test_functions_all_never_overrides_an_enclosing_functional():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).train()  # slow path: tensor ops inside F calls
    x = torch.randn(1, 3, 8)
    default = ModuleFunctionKernelProfiler(device="cpu")
    everything = ModuleFunctionKernelProfiler(device="cpu", functions="all")
    df_default, _ = default.profile(mha, [((x, x, x), {"need_weights": False})], warmup_iterations=0)
    df_all, _ = everything.profile(mha, [((x, x, x), {"need_weights": False})], warmup_iterations=0)
    rows_default = default.last_result.to_pandas()
    rows_all = everything.last_result.to_pandas()
    inside = rows_default["function_name"].notna()
    # wherever a functional call enclosed the op, the label is the same under functions="all"
    assert rows_all.loc[inside.values, "function_name"].tolist() == rows_default.loc[inside, "function_name"].tolist()
    assert len(df_all) >= len(df_default)


def test_functions_argument_is_validated():
    with pytest.raises(ValueError, match="functions"):
        ModuleFunctionKernelProfiler(device="cpu", functions="some")


class ForeachAdd(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._foreach_add([x, x], 1.0)[0]


def _fast_path_encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()


@pytest.mark.parametrize(
    ("build", "args", "private"),
    [
        (_fast_path_encoder, 1, torch._transformer_encoder_layer_fwd),  # eval: torch's fused fast path
        (lambda: nn.MultiheadAttention(8, 2, batch_first=True).eval(), 3, torch._native_multi_head_attention),
        (ForeachAdd, 1, torch._foreach_add),
    ],
    ids=["encoder_layer_fwd", "native_multi_head_attention", "foreach_add"],
)
def test_functions_all_names_private_torch_functions_by_where_they_live(build, args, private):
    x = torch.randn(2, 3, 8)
    profiler = ModuleFunctionKernelProfiler(device="cpu", functions="all")
    profiling_df, _ = profiler.profile(build(), [((x,) * args, {})], warmup_iterations=0)
    (name,) = set(profiling_df["function_name"])
    # torch.addmm's form: the path from torch that reaches the function called, not the builtin's class
    assert name == f"torch.{private.__name__}"
    module, _, attribute = name.rpartition(".")
    assert module == "torch" and getattr(torch, attribute) is private


class RawOnly(RawOps):
    """RawOps without its functional call: torch.addmm and Tensor operators only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.weight) + x * 2


def _profile_warned(model: nn.Module, samples: list, **options) -> tuple[object, list[warnings.WarningMessage]]:
    profiler = ModuleFunctionKernelProfiler(device="cpu", **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiler.profile(model, samples, warmup_iterations=1)
    return profiler.last_result, [w for w in caught if str(w.message).startswith("profiling_df is empty")]


_FAST_PATHS = {
    "encoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).eval(), 1),
    "attention": (lambda: nn.MultiheadAttention(8, 2, batch_first=True).eval(), 3),
}


@pytest.mark.parametrize("model", sorted(_FAST_PATHS))
def test_an_empty_profiling_df_from_the_fused_fast_path_is_said_once_pointing_at_functions_all(model):
    build, args = _FAST_PATHS[model]
    samples = [((torch.randn(2, 3, 8),) * args, {})]
    result, said = _profile_warned(build(), samples)
    assert result.profiling_df().empty and result.activity.num_rows > 0  # the pass ran ops, none came out
    (warning,) = said  # once per profile(), warm-up passes and recorded pass together
    message = str(warning.message)
    assert 'functions="all"' in message and "fast-path" in message and "last_result.unattributed()" in message
    assert warning.category is RuntimeWarning and warning.filename == __file__  # at profile()'s caller
    assert result.warnings == (message,)  # the CLI prints a result's warnings
    # the option it names gives rows, and then nothing is said
    everything, said = _profile_warned(build(), samples, functions="all")
    assert not everything.profiling_df().empty and said == [] and everything.warnings == ()


def test_an_empty_profiling_df_is_not_said_where_rows_came_out_or_another_warning_says_why():
    x = torch.randn(4, 8)
    result, said = _profile_warned(RawOps(), [((x,), {})])
    assert not result.profiling_df().empty and said == []
    result, said = _profile_warned(RawOnly(), [((x,), {})])  # raw torch ops only: empty, and said
    assert result.profiling_df().empty and len(said) == 1 and 'functions="all"' in str(said[0].message)
    torch._dynamo.reset()
    compiled = torch.compile(nn.Linear(8, 8), backend="aot_eager")  # empty, and its backend's warning says why
    result, said = _profile_warned(compiled, [((x,), {})])
    assert result.profiling_df().empty and said == []
    assert any("backend='aot_eager'" in message for message in result.warnings)
