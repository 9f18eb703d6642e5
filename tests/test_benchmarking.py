"""Replay benchmarks on CPU: rows per sample, exact kernels, candidates, loaded results, the CLI.

Times are never asserted; what is asserted is which rows exist, what the kernel multisets say,
the output errors (exact, from the inputs) and the arithmetic between columns.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from fixture_models import Mixed, erf_gelu, exact_relu, mixed_samples
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, benchmark, load
from aitune_dispatch.benchmarking import (
    BENCHMARK_COLUMNS,
    RecordedSample,
    clone_exact,
    random_tensor,
    recorded_samples,
    weighted_totals,
)
from aitune_dispatch.benchmarking.yardstick import same_kernels_per_call
from aitune_dispatch.results import ProfileResult, TensorMeta

REPEATS, WARMUP = 3, 1


def profile_cpu(model: nn.Module, samples: list, **options) -> ProfileResult:
    profiler = ModuleFunctionKernelProfiler(device="cpu", **options)
    return profiler.profile_result(model.eval(), samples, warmup_iterations=0)


def absolute(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    return torch.abs(x)  # wrong wherever x < 0


def broken(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    raise ValueError("boom")


# -- replay of the recorded samples -----------------------------------------------------------------
def test_one_row_per_function_sample_and_the_kernels_the_model_ran(demo_result):
    names = ["linear", "layer_norm", "gelu", "conv2d", "scaled_dot_product_attention"]
    table = benchmark(demo_result, names, repeats=REPEATS, warmup=WARMUP)
    assert list(table.columns) == BENCHMARK_COLUMNS
    expected = [(name, i) for name in names for i in range(len(demo_result.function_data[name]))]
    assert list(zip(table["function_name"], table["sample"])) == expected  # demo: 10 + 2 + 2 + 2 + 2 rows
    assert (table["implementation"] == "torch").all() and table["ok"].all() and table["error"].isna().all()
    # the layer_norm inputs are strided views (f32[B,64,64]{4096,1,64}): replayed with those strides
    assert table["kernels_match"].all()
    counts = {(n, i): c for n in names for i, (c, _) in enumerate(demo_result.function_data[n])}
    assert [counts[key] for key in expected] == table["calls"].tolist()
    assert (table["speedup"] == 1.0).all() and (table["max_abs_error"] == 0.0).all()
    assert (table["us_per_call"] > 0).all() and (table["recorded_us_per_call"] > 0).all()


def test_relu_samples_replay_their_kernels(mixed_result):
    table = benchmark(mixed_result, ["relu"], repeats=REPEATS, warmup=WARMUP)
    assert table["sample"].tolist() == [0, 1] and table["kernels_match"].tolist() == [True, True]


def test_a_cold_cache_replay_flushes_before_every_timed_call_and_times_only_the_call(mixed_result, monkeypatch):
    from aitune_dispatch.benchmarking import replay

    flushed: list[int] = []
    original_forward = replay._Flush.forward

    def counted(self) -> None:
        flushed.append(self._buffer[0].numel())
        original_forward(self)

    monkeypatch.setattr(replay, "cache_bytes", lambda device: 1 << 16)  # a small buffer keeps the test fast
    monkeypatch.setattr(replay._Flush, "forward", counted)
    table = benchmark(mixed_result, ["relu", "linear"], repeats=REPEATS, warmup=WARMUP, cache="cold")
    assert table.attrs["cache"] == "cold" and len(table) == 4
    assert flushed == [2 << 16] * (REPEATS * len(table))  # twice the cache, before each timed call
    # the flush's aten::zero_ is attributed to flush.i, not to the timed call: the kernels still match
    assert table["kernels_match"].all() and table["ok"].all() and (table["us_per_call"] > 0).all()
    assert benchmark(mixed_result, ["relu"], repeats=REPEATS, warmup=WARMUP).attrs["cache"] == "warm"
    assert len(flushed) == REPEATS * len(table)  # a warm replay flushes nothing
    with pytest.raises(ValueError, match="cache must be one of"):
        benchmark(mixed_result, ["relu"], cache="hot")


def test_the_cold_cache_buffer_is_sized_from_the_cache():
    from aitune_dispatch.benchmarking.replay import cache_bytes

    assert cache_bytes("cpu") >= 1 << 20


def test_recorded_kernels_include_nested_calls():
    class MHA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attention(x, x, x, need_weights=False)[0]

    x = torch.randn(2, 4, 8)
    # training mode: the slow path, F.multi_head_attention_forward with nested linear / sdpa calls
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    result = profiler.profile_result(MHA().train(), [((x,), {})], warmup_iterations=0)
    recorded = recorded_samples(result)
    outer = recorded[("multi_head_attention_forward", 0)]
    inner = recorded[("linear", 0)]
    # every kernel of the nested linear calls is in the enclosing call's multiset as well
    assert outer.calls == 1 and all(outer.kernels[k] >= n for k, n in inner.kernels.items())
    assert sum(outer.kernels.values()) > sum(inner.kernels.values())
    table = benchmark(result, ["multi_head_attention_forward"], repeats=REPEATS, warmup=WARMUP)
    assert table["kernels_match"].tolist() == [True]


def test_kernel_multisets_are_compared_per_call():
    recorded = RecordedSample(calls=2, call_us=(4.0, 6.0), kernels=Counter({"addmm": 2, "t": 2}))
    assert recorded.kernel_us == 10.0 and recorded.us_per_call == 5.0  # median of 4 and 6
    assert same_kernels_per_call(recorded, Counter({"addmm": 3, "t": 3}), 3)  # 3 x 2 == 2 x 3 for both
    assert not same_kernels_per_call(recorded, Counter({"addmm": 3, "t": 2}), 3)  # t: 2 x 2 != 2 x 3
    assert not same_kernels_per_call(recorded, Counter({"addmm": 3, "t": 3, "copy_": 3}), 3)  # copy_: 3 x 2 != 0
    assert same_kernels_per_call(RecordedSample(1, (0.0,), Counter()), Counter(), 5)  # nothing launched either way


def test_a_replay_that_runs_other_kernels_says_so(mixed_result):
    # recorded with gelu routed to an erf formula: the model's gelu calls ran mul/erf/add, not aten::gelu
    with aitune_dispatch.activate({"gelu": erf_gelu}):
        routed = profile_cpu(Mixed(), mixed_samples())
    recorded = recorded_samples(routed)[("gelu", 0)]
    assert "cpu::aten::gelu" not in recorded.kernels and recorded.kernels["cpu::aten::erf"] == 2  # 2 calls
    table = benchmark(routed, ["gelu"], repeats=REPEATS, warmup=WARMUP)
    assert table["kernels_match"].tolist() == [False, False] and table["ok"].all()


def test_replay_leaves_the_samples_untouched(mixed_result):
    (_, (args, _)), _ = mixed_result.function_data["relu"]
    before = args[0].clone()
    benchmark(mixed_result, ["relu"], candidates={"relu": inplace_relu}, repeats=REPEATS, warmup=WARMUP)
    assert torch.equal(args[0], before) and (before < 0).any()


def inplace_relu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    return x.relu_()


# -- the spread of the timed calls ------------------------------------------------------------------
def timed_as(monkeypatch, times_of) -> None:
    """Replace each timed call's kernel time with ``times_of(implementation)``; kernels stay the real ones."""
    from aitune_dispatch.benchmarking import replay

    real = replay._time

    def injected(plan, implementation, inputs):
        per_call, kernels = real(plan, implementation, inputs)
        times = times_of(implementation)
        assert len(times) == len(per_call) == plan.repeats
        return list(times), kernels

    monkeypatch.setattr(replay, "_time", injected)


def test_the_spread_is_the_interquartile_range_of_the_timed_calls(mixed_result, monkeypatch):
    # the original: four equal calls and one preempted one; the candidate: evenly spread calls
    timed_as(monkeypatch, lambda f: [10.0, 10.0, 10.0, 10.0, 50.0] if f is F.relu else [10.0, 20.0, 30.0, 40.0, 50.0])
    with pytest.warns(RuntimeWarning) as caught:
        table = benchmark(mixed_result, ["relu"], candidates={"relu": exact_relu}, repeats=5, warmup=0)
    assert list(table.columns) == BENCHMARK_COLUMNS and BENCHMARK_COLUMNS[-1] == "replay_iqr_us"
    rows = table.set_index(["sample", "implementation"])
    for sample in (0, 1):
        # numpy's linear interpolation: quartiles 10 and 10 (IQR 0), then 20 and 40 (IQR 20)
        assert rows.loc[(sample, "torch"), ["us_per_call", "replay_iqr_us"]].tolist() == [10.0, 0.0]
        assert rows.loc[(sample, "exact_relu"), ["us_per_call", "replay_iqr_us"]].tolist() == [30.0, 20.0]
        assert rows.loc[(sample, "exact_relu"), "speedup"] == 10.0 / 30.0
    spread = [str(w.message) for w in caught if "spread" in str(w.message)]
    assert len(spread) == 1, spread  # once per benchmark() call, naming the rows
    assert spread[0].startswith("benchmark(): the timed calls of 2 of 4 rows spread widely (IQR > 25% of the median)")
    assert "relu sample 0 exact_relu (IQR 67% of 30 µs)" in spread[0] and "relu sample 1 exact_relu" in spread[0]
    assert "torch (IQR" not in spread[0]  # one preempted call in five moves neither the median nor the IQR


def test_a_tight_spread_says_nothing(mixed_result, monkeypatch):
    timed_as(monkeypatch, lambda f: [10.0, 11.0, 12.0, 13.0])  # IQR 1.5 of a median of 11.5: 13%
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = benchmark(mixed_result, ["relu"], candidates={"relu": exact_relu}, repeats=4, warmup=0)
    assert table["replay_iqr_us"].tolist() == [1.5] * 4


def test_the_worst_spreads_are_named_first_and_the_rest_counted(demo_result, monkeypatch):
    counter = iter(range(1, 1000))

    def widening(f):  # every row spreads wider than the one before, all of them wider than 25%
        step = 10.0 * next(counter)
        return [10.0, 10.0 + step, 10.0 + 2 * step]

    timed_as(monkeypatch, widening)
    with pytest.warns(RuntimeWarning, match="spread widely") as caught:
        table = benchmark(demo_result, ["linear"], repeats=3, warmup=0)
    message = str(caught[0].message)
    relative = (table["replay_iqr_us"] / table["us_per_call"]).tolist()
    worst = sorted(range(len(table)), key=lambda i: -relative[i])
    named = [f"linear sample {table['sample'][i]} torch" for i in worst]
    assert message.index(named[0]) < message.index(named[1]) < message.index(named[4])
    assert named[5] not in message and f"and {len(table) - 5} more" in message


def test_a_single_timed_call_has_no_spread(mixed_result):
    table = benchmark(mixed_result, ["relu"], candidates={"relu": [exact_relu, broken]}, repeats=1, warmup=0)
    ran = table["implementation"] != "broken"
    assert (table.loc[ran, "replay_iqr_us"] == 0.0).all() and table.loc[~ran, "replay_iqr_us"].isna().all()


# -- candidates -------------------------------------------------------------------------------------
def test_correct_wrong_and_raising_candidates(mixed_result):
    table = benchmark(
        mixed_result, ["relu"], candidates={"relu": [exact_relu, absolute, broken]}, repeats=REPEATS, warmup=WARMUP
    )
    assert table["implementation"].tolist() == ["torch", "exact_relu", "absolute", "broken"] * 2
    rows = table.set_index(["sample", "implementation"])
    for sample in (0, 1):
        (_, (args, _)) = mixed_result.function_data["relu"][sample]
        x = args[0]
        assert rows.loc[(sample, "exact_relu"), "ok"] and rows.loc[(sample, "exact_relu"), "max_abs_error"] == 0.0
        # |x| - relu(x) = -x where x < 0 (else 0): the error is largest at min(x)
        assert not rows.loc[(sample, "absolute"), "ok"]
        assert rows.loc[(sample, "absolute"), "max_abs_error"] == pytest.approx(-float(x.min()), rel=0, abs=0)
        assert rows.loc[(sample, "absolute"), "error"].startswith("output differs from the original")
        assert not rows.loc[(sample, "broken"), "ok"]
        assert rows.loc[(sample, "broken"), "error"] == "the candidate raised ValueError: boom"
        assert math.isnan(rows.loc[(sample, "broken"), "us_per_call"])
        torch_us = rows.loc[(sample, "torch"), "us_per_call"]
        for name in ("exact_relu", "absolute"):  # speedup = original time / candidate time
            assert rows.loc[(sample, name), "speedup"] == torch_us / rows.loc[(sample, name), "us_per_call"]
        assert pd.isna(rows.loc[(sample, "exact_relu"), "kernels_match"])  # kernels_match is the original's


def test_weighted_total_is_calls_times_time_with_fallback_to_the_original(mixed_result):
    table = benchmark(mixed_result, ["relu"], candidates={"relu": [exact_relu, broken]}, repeats=REPEATS, warmup=1)
    rows = table.set_index(["sample", "implementation"])["us_per_call"]
    calls = {0: 2, 1: 1}  # batch 2 twice, batch 3 once
    original = calls[0] * rows[(0, "torch")] + calls[1] * rows[(1, "torch")]
    exact = calls[0] * rows[(0, "exact_relu")] + calls[1] * rows[(1, "exact_relu")]
    assert table.attrs["weighted"] == {"relu": {"torch": original, "exact_relu": exact, "broken": original}}
    totals = weighted_totals(table).set_index("implementation")
    assert totals.loc["broken", "fallbacks"] == 2 and totals.loc["exact_relu", "fallbacks"] == 0
    assert totals.loc["exact_relu", "speedup"] == original / exact and totals.loc["broken", "speedup"] == 1.0


def test_candidates_are_named_by_qualname_or_by_the_dict():
    table_names = benchmark(
        profile_cpu(Mixed(), mixed_samples()[:1]),
        ["relu"],
        candidates={"relu": {"clamp": exact_relu}},
        repeats=1,
        warmup=0,
    )["implementation"].tolist()
    assert table_names == ["torch", "clamp"]


@pytest.mark.parametrize(
    ("candidates", "message"),
    [
        ({"relu": [exact_relu, exact_relu]}, "both named 'exact_relu'"),
        ({"relu": {"torch": exact_relu}}, "the name of the original"),
        ({"relu": 3}, "must be a callable"),
        ({"softmax": exact_relu}, "does not replay"),
    ],
)
def test_bad_candidates_are_refused_before_anything_runs(mixed_result, candidates, message):
    with pytest.raises((TypeError, ValueError), match=message):
        benchmark(mixed_result, ["relu"], candidates=candidates)


def test_unknown_functions_and_bad_counts_are_refused(mixed_result):
    with pytest.raises(ValueError, match=r"no samples of \['conv2d'\]"):
        benchmark(mixed_result, ["conv2d"])
    with pytest.raises(TypeError, match="not a single string"):
        benchmark(mixed_result, "relu")
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        benchmark(mixed_result, ["relu"], repeats=0)


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"functions": 5}, TypeError, "functions must be a list of names such as ['linear'] or None; got int 5"),
        ({"functions": ["relu", 5]}, TypeError, "functions must contain function names (strings); got [5]"),
        ({"seed": "a"}, TypeError, "seed must be an integer (it seeds the random inputs); got str 'a'"),
        ({"seed": None}, TypeError, "seed must be an integer (it seeds the random inputs); got NoneType None"),
        ({"progress": 5}, TypeError, "progress must be a callable such as lambda done, total, label: ..., or None"),
        ({"make_tensor": "zeros"}, TypeError, "make_tensor must be a callable that takes a TensorMeta"),
    ],
)
def test_arguments_of_the_wrong_type_are_refused_before_anything_runs(mixed_result, monkeypatch, options, error, says):
    from aitune_dispatch.benchmarking import replay

    def never(*args, **kwargs):
        raise AssertionError("replayed a sample before the arguments were checked")

    monkeypatch.setattr(replay, "_sample_rows", never)
    with pytest.raises(error) as info:
        benchmark(mixed_result, **{"functions": ["relu"], **options})
    assert says in str(info.value)


def test_a_candidate_the_cpu_source_cannot_see_is_not_ok(mixed_result):
    outputs: dict[tuple[int, ...], torch.Tensor] = {}

    def no_ops(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        # computed once (the validation call), then returned without any aten op, as compiled CPU code
        # (Inductor's C++ kernels) would run: the CPU source cannot see that time
        key = tuple(x.shape)
        if key not in outputs:
            outputs[key] = torch.relu(x)
        return outputs[key]

    row = benchmark(mixed_result, ["relu"], candidates={"relu": no_ops}, repeats=REPEATS, warmup=WARMUP).iloc[1]
    assert not row["ok"] and row["max_abs_error"] == 0.0 and math.isnan(row["us_per_call"])
    assert "dispatched no aten op" in row["error"]


# -- loaded results ---------------------------------------------------------------------------------
def test_a_result_saved_without_tensors_replays_from_its_metadata(demo_result, tmp_path):
    loaded = load(demo_result.save(tmp_path / "demo"))
    table = benchmark(loaded, ["linear", "layer_norm"], repeats=REPEATS, warmup=WARMUP)
    assert table["ok"].all() and table["kernels_match"].all() and len(table) == 10 + 2


def test_integer_inputs_are_refused_unless_made(tmp_path):
    class Embed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = nn.Embedding(10, 4)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.table(ids)

    result = profile_cpu(Embed(), [((torch.tensor([[1, 2, 3]]),), {})])
    loaded = load(result.save(tmp_path / "embed"))
    refused = benchmark(loaded, ["embedding"], repeats=1, warmup=0).iloc[0]
    assert not refused["ok"] and "int64[1, 3] holds indices" in refused["error"] and "make_tensor=" in refused["error"]
    made: list[TensorMeta] = []

    def make(meta: TensorMeta) -> torch.Tensor:
        made.append(meta)
        return (
            torch.zeros(meta.shape, dtype=getattr(torch, meta.dtype)) if meta.dtype == "int64" else random_tensor(meta)
        )

    row = benchmark(loaded, ["embedding"], repeats=1, warmup=0, make_tensor=make).iloc[0]
    assert row["ok"] and row["kernels_match"]
    assert [m.dtype for m in made] == ["int64", "float32"]  # the ids and the weight, in argument order


def test_random_tensors_and_clones_keep_strides_and_overlaps():
    meta = TensorMeta(shape=(2, 3), dtype="float16", stride=(1, 2), device="cpu", layout="strided", itemsize=2)
    made = random_tensor(meta, torch.Generator().manual_seed(0))
    assert made.shape == (2, 3) and made.stride() == (1, 2) and made.dtype == torch.float16
    expanded = torch.arange(3.0).expand(4, 3)  # stride (0, 1): four rows share one storage row
    copy = clone_exact(((expanded, [expanded.t()]), {"x": expanded}))
    assert copy[0][0].stride() == (0, 1) and copy[0][1][0].stride() == (1, 0) and copy[1]["x"].stride() == (0, 1)
    assert torch.equal(copy[0][0], expanded) and copy[0][0].data_ptr() != expanded.data_ptr()
    # one tensor passed twice stays one object; views of one storage share the copy's storage
    qkv = torch.randn(4, 6)
    q, k = qkv[:, :3], qkv[:, 3:]
    (same_a, same_b, q2, k2), _ = clone_exact(((q, q, q, k), {}))
    assert same_a is same_b and q2.untyped_storage().data_ptr() == k2.untyped_storage().data_ptr()
    assert q2.data_ptr() != q.data_ptr() and torch.equal(q2, q) and torch.equal(k2, k) and k2.stride() == (6, 1)


def test_a_cuda_result_needs_cuda(monkeypatch):
    from pathlib import Path

    saved = load(Path(__file__).parent / "data" / "h200_demo_result")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="recorded on CUDA"):
        benchmark(saved)


def test_roofline_columns_read_each_replayed_call_against_the_bound(demo_result):
    from aitune_dispatch.results import work
    from aitune_dispatch.schema import ROOFLINE_COLUMNS

    table = benchmark(demo_result, ["linear"], repeats=REPEATS, warmup=WARMUP, roofline=True)
    assert list(table.columns) == BENCHMARK_COLUMNS + ROOFLINE_COLUMNS
    for row in table.itertuples():
        _, sample = demo_result.function_data["linear"][row.sample]
        expected = work.call_work("linear", sample)
        assert row.flops == expected.flops and row.min_bytes == expected.min_bytes  # one call, not the count
        assert row.flop_per_s == pytest.approx(expected.flops / (row.us_per_call * 1e-6))
    assert table["fraction_of_bound"].isna().all()  # the CPU has no limits
    assert list(benchmark(demo_result, ["gelu"], repeats=2, warmup=0).columns) == BENCHMARK_COLUMNS  # opt-in
