"""The work of a call (FLOPs by torch's formulas, bytes a lower bound), the device limits and the
roofline view, with the arithmetic written out (issue 24). The GPU check that a large matmul and a
large elementwise op sit near their bounds is tests/test_roofline_gpu.py."""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, schema
from aitune_dispatch.results import limits, views, work
from aitune_dispatch.results.values import TensorMeta

pytestmark = pytest.mark.single_backend  # nothing here traces


def _f16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(torch.float16)


def test_linear_flops_and_bytes_are_torchs_formula_on_the_samples_shapes():
    x, w, b = _f16(32, 128), _f16(256, 128), _f16(256)
    got = work.call_work("linear", ((x, w, b), {}))
    assert got.flops == 2 * 32 * 128 * 256 == 2_097_152  # one multiply-add per (row, in, out)
    # read x, w and b once, write y [32, 256] once, 2 bytes each
    assert got.min_bytes == (32 * 128 + 256 * 128 + 256 + 32 * 256) * 2 == 90_624
    assert got.dtype == "float16" and got.why == ""


def test_attention_counts_both_matmuls_and_a_saved_sample_counts_the_same():
    q = torch.randn(2, 8, 128, 64)
    got = work.call_work("scaled_dot_product_attention", ((q, q, q), {}))
    assert got.flops == 2 * (2 * 2 * 8 * 128 * 128 * 64) == 67_108_864  # Q·Kᵀ and P·V
    assert got.min_bytes == 2 * (2 * 8 * 128 * 64) * 4  # q, k and v are one tensor, read once; out written once
    saved = ((TensorMeta.from_tensor(q), TensorMeta.from_tensor(q.clone()), TensorMeta.from_tensor(q)), {})
    again = work.call_work("scaled_dot_product_attention", saved)
    assert again.flops == got.flops and again.dtype == "float32"


def test_a_call_without_a_formula_has_unknown_flops_and_still_its_bytes():
    x = _f16(8, 1024)
    gelu = work.call_work("gelu", ((x,), {}))
    assert gelu.flops is None  # no guess for elementwise math
    assert gelu.min_bytes == 2 * 8 * 1024 * 2 == 32_768  # read once, write once
    norm = work.call_work("layer_norm", ((x, (1024,)), {}))
    assert norm.flops is None and norm.min_bytes == 2 * 8 * 1024 * 2


def test_unknown_functions_and_calls_that_fail_on_meta_say_why():
    missing = work.call_work("no_such_function", ((_f16(2, 2),), {}))
    assert (missing.flops, missing.min_bytes) == (None, None) and "no torch function" in missing.why
    broken = work.call_work("linear", ((_f16(2, 3), _f16(4, 5)), {}))  # shapes that do not multiply
    assert (broken.flops, broken.min_bytes) == (None, None) and "meta" in broken.why


def test_work_needs_no_compiler():
    code = (
        "import sys, torch, torch.nn.functional as F\n"
        "from aitune_dispatch.results import work\n"
        "x = torch.randn(4, 8)\n"
        "print(work.call_work('linear', ((x, torch.randn(8, 8)), {})).flops,"
        " any(m.startswith('torch._dynamo') for m in sys.modules))\n"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(2 * 4 * 8 * 8), "False"]  # FlopCounterMode would import Dynamo


def test_limits_are_found_by_the_recorded_gpu_name():
    assert limits.limits_for("NVIDIA H200").name == "H200 SXM"
    assert limits.limits_for("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert limits.limits_for("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert limits.limits_for("NVIDIA A100-SXM4-80GB").name == "A100 SXM 80GB"
    assert limits.limits_for("NVIDIA GeForce GTX 1080") is None and limits.limits_for(None) is None
    h200 = limits.limits_for("NVIDIA H200")
    assert limits.peak_flops(h200, "bfloat16") == 989.5e12 and h200.bandwidth == 4.8e12
    assert limits.peak_flops(h200, "float32") == 67e12  # CUDA cores: PyTorch's default leaves TF32 off
    assert limits.peak_flops(h200, "float32", allow_tf32=True) == 494.5e12
    assert limits.peak_flops(h200, "int8") is None and limits.peak_flops(None, "bfloat16") is None
    assert all(row.source and row.bandwidth > 0 for row in limits.LIMITS)


def _samples(rows: list[tuple[str, int, int, float]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["function_name", "sample", "calls", "kernel_us"])
    frame["function_name"] = frame["function_name"].astype(pd.Series(["a"]).dtype)
    frame["signature"] = [f"sample {i}" for i in range(len(frame))]
    return frame


H200 = {schema.META_DEVICE: "cuda", schema.META_GPU_NAME: "NVIDIA H200", schema.META_ALLOW_TF32: "False"}


def test_roofline_rates_bound_and_worth_on_the_h200():
    table = _samples([("linear", 0, 2, 10.0), ("gelu", 0, 4, 100.0)])
    found = {
        ("linear", 0): work.Work(flops=4096**3 * 2, min_bytes=3 * 4096 * 4096 * 2, dtype="bfloat16"),
        ("gelu", 0): work.Work(flops=None, min_bytes=2 * 2**24 * 2, dtype="bfloat16"),
    }
    rows = views.roofline_samples(table, found, H200).set_index("function_name")
    assert list(views.roofline_samples(table, found, H200).columns) == list(table.columns) + schema.ROOFLINE_COLUMNS
    linear = rows.loc["linear"]
    flops = 2 * 2 * 4096**3  # two calls of 2 · 4096³ = 274,877,906,944 FLOPs
    assert linear["flops"] == flops and linear["min_bytes"] == 2 * 3 * 4096 * 4096 * 2
    assert linear["flop_per_s"] == pytest.approx(flops / 10e-6)  # 2.7e16: more than any GPU...
    assert linear["intensity"] == pytest.approx(4096 / 3)  # 1365 FLOP/byte, right of the ridge (206)
    assert linear["bound"] == "compute" and linear["peak_flop_per_s"] == 989.5e12
    assert linear["fraction_of_bound"] == pytest.approx(flops / 10e-6 / 989.5e12)  # ...so > 1: the times are made up
    assert linear["worth_us"] == 0.0  # a fraction above 1 counts as at the bound
    gelu = rows.loc["gelu"]
    assert math.isnan(gelu["flops"]) and pd.isna(gelu["bound"])  # no formula: position unknown
    moved = 4 * 2 * 2**24 * 2  # four calls, read and write 2^24 bf16 values: 268,435,456 bytes
    assert gelu["bytes_per_s"] == pytest.approx(moved / 100e-6)  # 2.7e12 B/s
    assert gelu["fraction_of_bound"] == pytest.approx(moved / 100e-6 / 4.8e12)  # 56 % of the bandwidth
    assert gelu["worth_us"] == pytest.approx(100.0 * (1 - moved / 100e-6 / 4.8e12))


def test_a_memory_bound_call_is_measured_against_intensity_times_bandwidth():
    table = _samples([("linear", 0, 1, 100.0)])
    found = {("linear", 0): work.Work(flops=2 * 64 * 4096 * 4096, min_bytes=4096 * 4096 * 2, dtype="bfloat16")}
    row = views.roofline_samples(table, found, H200).iloc[0]
    intensity = 2 * 64 * 4096 * 4096 / (4096 * 4096 * 2)  # 64 FLOP/byte, left of the ridge 989.5/4.8 = 206
    assert row["intensity"] == pytest.approx(intensity) and row["bound"] == "memory"
    attainable = intensity * 4.8e12  # 3.07e14 FLOP/s
    assert row["fraction_of_bound"] == pytest.approx(2 * 64 * 4096 * 4096 / 100e-6 / attainable)
    assert row["worth_us"] == pytest.approx(100.0 * (1 - row["fraction_of_bound"]))


def test_without_known_limits_every_fraction_is_unknown():
    table = _samples([("linear", 0, 1, 10.0)])
    found = {("linear", 0): work.Work(flops=10**9, min_bytes=10**6, dtype="bfloat16")}
    for metadata in ({schema.META_DEVICE: "cpu"}, {schema.META_DEVICE: "cuda", schema.META_GPU_NAME: "Mystery GPU"}):
        row = views.roofline_samples(table, found, metadata).iloc[0]
        assert row["flops"] == 10**9 and row["flop_per_s"] == pytest.approx(10**9 / 10e-6)
        assert all(math.isnan(row[c]) for c in ("peak_flop_per_s", "fraction_of_bound", "worth_us"))
    assert views.worth_optimizing(views.roofline_samples(table, found, {})).empty


def test_worth_optimizing_ranks_by_the_time_the_bound_says_could_be_saved():
    table = _samples([("a", 0, 1, 100.0), ("b", 0, 1, 50.0), ("c", 0, 1, 10.0)])
    bandwidth = 4.8e12
    found = {  # bytes/s over the bandwidth: a at 90 % (10 µs left), b at 10 % (45 µs), c at 50 % (5 µs)
        ("a", 0): work.Work(None, int(0.9 * bandwidth * 100e-6), "bfloat16"),
        ("b", 0): work.Work(None, int(0.1 * bandwidth * 50e-6), "bfloat16"),
        ("c", 0): work.Work(None, int(0.5 * bandwidth * 10e-6), "bfloat16"),
    }
    ranked = views.worth_optimizing(views.roofline_samples(table, found, H200))
    assert list(ranked.columns) == views.WORTH_COLUMNS
    assert ranked["function_name"].tolist() == ["b", "a", "c"]  # b is half a's time but has most to gain
    assert ranked["worth_us"].tolist() == pytest.approx([45.0, 10.0, 5.0], rel=1e-6)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x))


def test_a_cpu_run_gets_work_per_sample_and_the_spec_frames_stay_as_they_are():
    torch.manual_seed(0)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    samples = [((torch.randn(16, 64),), {}), ((torch.randn(4, 64),), {})]
    result = profiler.profile_result(_Net().eval(), samples, warmup_iterations=0)
    plain = result.samples()
    assert list(plain.columns) == schema.SAMPLE_COLUMNS and list(result.describe().columns) == schema.SUMMARY_COLUMNS
    rows = result.samples(roofline=True)
    assert list(rows.columns) == schema.SAMPLE_COLUMNS + schema.ROOFLINE_COLUMNS
    linear = rows[rows["function_name"] == "linear"].set_index("sample")
    assert linear.loc[0, "flops"] == 2 * 16 * 64 * 32 and linear.loc[1, "flops"] == 2 * 4 * 64 * 32
    assert np.isnan(linear["fraction_of_bound"]).all()  # the CPU has no limits here
    summary = result.describe(roofline=True)
    assert list(summary.columns) == schema.SUMMARY_COLUMNS + schema.ROOFLINE_COLUMNS
    by_name = summary.set_index("function_name")
    assert by_name.loc["linear", "flops"] == 2 * (16 + 4) * 64 * 32  # its samples' FLOPs added up
    assert math.isnan(by_name.loc["gelu", "flops"]) and by_name.loc["gelu", "min_bytes"] == 2 * (16 + 4) * 32 * 4
    with pytest.raises(ValueError, match="by=None"):
        result.describe(by="device", roofline=True)


def test_the_module_roofline_adds_up_the_calls_made_in_each_module(h200_result):
    samples = h200_result.samples(roofline=True)
    modules = h200_result.module_roofline()
    assert list(modules.columns) == views.MODULE_ROOFLINE_COLUMNS
    # every sampled call is in exactly one module row: the time and the time to gain add up
    assert modules["kernel_us"].sum() == pytest.approx(samples["kernel_us"].sum())
    assert modules["worth_us"].sum() == pytest.approx(samples["worth_us"].sum())
    assert modules["calls"].sum() == samples["calls"].sum()
    qkv = modules.set_index("module").loc["blocks.*.qkv"]
    linear = samples[samples["function_name"] == "linear"]
    # qkv's calls are linear calls only: their FLOPs are known and reach the fraction their time gives
    assert qkv["flops"] > 0 and qkv["fraction_of_bound"] == pytest.approx(1 - qkv["worth_us"] / qkv["kernel_us"])
    assert qkv["flops"] <= linear["flops"].sum()
    assert modules["worth_us"].is_monotonic_decreasing


def test_a_lookup_counts_the_rows_it_reads_not_its_whole_table():
    indices = torch.randint(0, 50_000, (4, 128))
    table = torch.randn(50_000, 64)
    got = work.call_work("embedding", ((indices, table), {}))
    rows = 4 * 128 * 64 * 4  # the gathered rows: 131,072 bytes, as many as the output
    assert got.min_bytes == 4 * 128 * 8 + 2 * rows  # the indices, the rows read, the output written
    assert got.min_bytes < table.numel() * 4  # not the 12.8 MB table, which the lookup never reads whole
    assert got.dtype == "float32" and got.flops is None
