"""``activate()``: which calls reach the candidate, what is restored, and what the profiler sees."""

from __future__ import annotations

import collections
import math
import warnings

import pandas as pd
import pyarrow.compute as pc
import pytest
import torch
import torch.nn.functional as F
from fixture_models import erf_gelu, exact_relu, mixed_inputs, mixed_model, mixed_samples
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, activate, benchmark, encoded

original_relu = F.relu


def modes() -> int:
    return int(torch._C._len_torch_function_stack())


@pytest.fixture
def model() -> nn.Module:
    return mixed_model(seed=0)


def test_every_call_is_routed_and_a_candidate_calling_the_original_reaches_it(model):
    seen: list[tuple[int, ...]] = []

    def via_original(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return F.relu(x, inplace=inplace)  # the original: the mode is popped while a candidate runs

    with torch.no_grad():
        expected = [model(x) for x in mixed_inputs()]
        with activate({"relu": via_original}) as activation:
            outputs = [model(x) for x in mixed_inputs()]
    assert seen == [(2, 8), (2, 8), (3, 8)] and activation.routed == {"relu": 3}  # once per call, no recursion
    assert all(torch.equal(a, b) for a, b in zip(outputs, expected))
    assert activation.implementations == {"relu": "via_original"}


def test_only_routes_the_samples_the_candidate_validated_on(model):
    def batch2_relu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        return torch.clamp_min(x, 0.0) if x.shape[0] == 2 else x * 2.0  # wrong for batch 3

    profiler = ModuleFunctionKernelProfiler(device="cpu")
    result = profiler.profile_result(model, mixed_samples(), warmup_iterations=0)
    table = benchmark(result, ["relu"], candidates={"relu": batch2_relu}, repeats=2, warmup=0)
    assert table.loc[table["implementation"] == "batch2_relu", "ok"].tolist() == [True, False]
    with torch.no_grad():
        expected = [model(x) for x in mixed_inputs()]
        # min_speedup=None: the samples it validated on, whatever its measured speed
        with activate({"relu": batch2_relu}, only=table, min_speedup=None) as activation:
            outputs = [model(x) for x in mixed_inputs()]
    # the two batch-2 calls were routed; the batch-3 call (where it was wrong) ran the original
    assert activation.routed == {"relu": 2}
    assert all(torch.equal(a, b) for a, b in zip(outputs, expected))


def repeated_relu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """relu's values bit for bit, computed 200 times over: a validated candidate that is slower."""
    for _ in range(199):
        torch.clamp_min(x, 0.0)
    return torch.clamp_min(x, 0.0)


def relu_table(model: nn.Module, candidate) -> tuple[pd.DataFrame, dict[int, int]]:
    """The benchmark of ``candidate`` on the relu samples (batch 2: 2 calls, batch 3: 1 call), and calls per sample."""
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    result = profiler.profile_result(model, mixed_samples(), warmup_iterations=0)
    table = benchmark(result, ["relu"], candidates={"relu": candidate}, repeats=3, warmup=0)
    return table, {0: 2, 1: 1}


def routed_calls(model: nn.Module, candidate, table: pd.DataFrame, **options) -> tuple[int, pd.DataFrame]:
    with torch.no_grad(), activate({"relu": candidate}, only=table, **options) as activation:
        for x in mixed_inputs():
            model(x)
    return activation.routed["relu"], activation.skipped


def test_only_skips_a_validated_candidate_that_measured_slower(model):
    table, calls = relu_table(model, repeated_relu)
    rows = table[table["implementation"] == "repeated_relu"].set_index("sample")
    assert rows["ok"].all()  # validated everywhere: only its measured speed decides
    faster = [s for s in rows.index if rows.loc[s, "speedup"] >= 1.0]  # measured, not assumed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        routed, skipped = routed_calls(model, repeated_relu, table)
    assert routed == sum(calls[s] for s in faster)
    assert skipped["sample"].tolist() == [s for s in rows.index if s not in faster]
    assert (skipped["reason"].str.startswith("slower than min_speedup=1.0")).all()
    assert skipped["speedup"].tolist() == [rows.loc[s, "speedup"] for s in skipped["sample"]]
    said = [str(w.message) for w in caught if "min_speedup" in str(w.message)]
    assert len(said) == (0 if skipped.empty else 1)  # one warning per activate(), none when all are routed
    routed_anyway, none_skipped = routed_calls(model, repeated_relu, table, min_speedup=None)
    assert routed_anyway == 3 and none_skipped.empty  # the opt-in routes every validated sample


def test_the_speed_threshold_decides_on_the_measured_speedup(model):
    table, _ = relu_table(model, {"clamp": exact_relu})
    candidate = table["implementation"] == "clamp"
    table.loc[candidate, "speedup"] = [0.51, 1.0]  # injected: twice as slow on batch 2, as fast on batch 3
    with pytest.warns(RuntimeWarning) as caught:
        routed, skipped = routed_calls(model, {"clamp": exact_relu}, table)
    assert routed == 1  # the batch-3 call: "at least as fast" includes a tie
    assert skipped.to_dict("records") == [
        {
            "function_name": "relu",
            "implementation": "clamp",
            "sample": 0,
            "calls": 2,
            "speedup": 0.51,
            "reason": "slower than min_speedup=1.0 (0.51x)",
        }
    ]
    message = " ".join(str(w.message) for w in caught)
    assert "activate(): 1 of 2 samples run the original" in message and "relu/clamp sample 0 (0.51x)" in message
    assert "min_speedup=None" in message and "activation.skipped" in message
    assert routed_calls(model, {"clamp": exact_relu}, table, min_speedup=0.5)[0] == 3  # a lower bar: both
    assert routed_calls(model, {"clamp": exact_relu}, table, min_speedup=1.5)[0] == 0  # a higher one: neither
    table.loc[candidate, "speedup"] = [1.2, math.nan]  # the original's time unknown: not shown to be as fast
    routed, skipped = routed_calls(model, {"clamp": exact_relu}, table)
    assert routed == 2 and skipped["reason"].tolist() == ["speedup unknown (the original was not timed)"]


def test_samples_that_did_not_validate_are_listed_as_skipped(model):
    def batch2_relu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        return torch.clamp_min(x, 0.0) if x.shape[0] == 2 else x * 2.0  # wrong for batch 3

    table, _ = relu_table(model, batch2_relu)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        _, skipped = routed_calls(model, batch2_relu, table, min_speedup=None)
    assert skipped["sample"].tolist() == [1]
    assert skipped["reason"].item().startswith("not validated: output differs from the original")


def test_everything_routed_says_nothing(model):
    table, _ = relu_table(model, {"clamp": exact_relu})
    table.loc[table["implementation"] == "clamp", "speedup"] = [1.0, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        routed, skipped = routed_calls(model, {"clamp": exact_relu}, table)
    columns = ["function_name", "implementation", "sample", "calls", "speedup", "reason"]
    assert routed == 3 and skipped.empty and list(skipped.columns) == columns
    with activate({"relu": exact_relu}) as activation:  # without only= there is nothing measured to skip on
        model(mixed_inputs()[0])
    assert activation.routed == {"relu": 1} and activation.skipped.empty


@pytest.mark.parametrize(
    ("bad", "error"), [(True, TypeError), ("1", TypeError), (0, ValueError), (-1.0, ValueError), (math.inf, ValueError)]
)
def test_min_speedup_must_be_a_positive_number_or_none(bad, error):
    with pytest.raises(error, match=r"^min_speedup must be a positive number \(1\.0: at least as fast"):
        activate({"relu": exact_relu}, min_speedup=bad)


def test_only_needs_the_benchmark_table_and_the_candidate_in_it(model):
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    result = profiler.profile_result(model, [((mixed_inputs()[0],), {})], warmup_iterations=0)
    table = benchmark(result, ["relu"], candidates={"relu": {"clamp": torch.clamp_min}}, repeats=1, warmup=0)
    with pytest.raises(
        ValueError, match=r"no rows for implementation 'other' of 'relu' \(it has \['clamp', 'torch'\]\)"
    ):
        activate({"relu": {"other": torch.clamp_min}}, only=table)
    with pytest.raises(ValueError, match="a copy read back from CSV loses them"):
        activate({"relu": {"clamp": torch.clamp_min}}, only=pd.DataFrame(table))  # attrs dropped
    with pytest.raises(ValueError, match="routes 'relu' to one candidate"):
        activate({"relu": [torch.clamp_min, torch.abs]})
    with pytest.raises(ValueError, match="not a torch.nn.functional function"):
        activate({"no_such_function": torch.abs})


def test_everything_is_restored_after_an_exception(model):
    calls = collections.Counter()

    def counting(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        calls["candidate"] += 1
        return torch.clamp_min(x, 0.0)

    assert modes() == 0
    with pytest.raises(KeyError, match="in the block"):
        with activate({"relu": counting}):
            model(mixed_inputs()[0])
            raise KeyError("in the block")
    assert modes() == 0 and F.relu is original_relu

    def raising(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        raise ArithmeticError("in the candidate")

    with pytest.raises(ArithmeticError, match="in the candidate"):
        with activate({"relu": raising}):
            model(mixed_inputs()[0])
    assert modes() == 0
    model(mixed_inputs()[0])  # after both blocks: the original runs, the candidate is not called again
    assert calls == {"candidate": 1}


def test_an_activation_is_not_reentrant():
    activation = activate({"relu": torch.clamp_min})
    with activation:
        with pytest.raises(RuntimeError, match="already active"):
            activation.__enter__()
    assert modes() == 0
    with activation:  # usable again once left
        assert modes() == 1


def test_profiling_inside_an_activation_shows_the_candidates_kernels_in_the_same_call(model):
    samples = mixed_samples()
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    plain = profiler.profile_result(model, samples, warmup_iterations=0)
    with activate({"gelu": erf_gelu}) as activation:
        routed = profiler.profile_result(model, samples, warmup_iterations=0)
    assert activation.routed == {"gelu": 3}

    def gelu_rows(result):
        rows = encoded.decoded(result.activity.filter(pc.equal(result.activity["function_name"], "gelu"))).to_pandas()
        return set(rows["module_name"]), collections.Counter(rows["kernel"])

    plain_modules, plain_kernels = gelu_rows(plain)
    routed_modules, routed_kernels = gelu_rows(routed)
    assert routed_modules == plain_modules == {""}  # F.gelu is called in the root module's forward
    assert plain_kernels == {"cpu::aten::gelu": 3}
    # x * 0.5 * (1 + erf(x / sqrt 2)): div, erf, add, mul, mul per call, three calls
    assert routed_kernels == {"cpu::aten::div": 3, "cpu::aten::erf": 3, "cpu::aten::add": 3, "cpu::aten::mul": 6}
    assert routed.calls.num_rows == plain.calls.num_rows  # the same functional calls, 4 per forward


def test_python_functionals_are_routed_under_the_profiler_too():
    # F.pad calls other functionals, so the profiler runs a gate-free copy of it; with a mode below
    # (this activation) it must call the original instead, or the activation would never see the call
    class Padded(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.pad(x, (1, 1))

    def zero_pad(x: torch.Tensor, pad: tuple[int, ...], mode: str = "constant", value: float | None = None):
        return torch.constant_pad_nd(x, pad, 0.0)

    x = torch.randn(2, 3)
    with activate({"pad": zero_pad}) as activation:
        result = ModuleFunctionKernelProfiler(device="cpu").profile_result(Padded(), [((x,), {})], warmup_iterations=0)
    assert activation.routed == {"pad": 1}
    assert result.calls["function_name"].to_pylist() == ["pad"]
    pad_kernels = result.activity.filter(pc.equal(result.activity["function_name"], "pad"))["kernel"].to_pylist()
    assert pad_kernels == ["cpu::aten::constant_pad_nd"]
