"""Per-sample time: every functional call links to its distinct sample; ``ProfileResult.samples()``.

A tiny model with known call patterns (three inputs, two of one shape) gives exact sample
indices and counts; the demo model checks that the per-sample view adds up to ``describe()``.
"""

from __future__ import annotations

import re

import pyarrow.compute as pc
import pytest
import torch
from fixture_models import Mixed, mixed_samples
from fixture_results import H200_RESULT
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, encoded, load
from aitune_dispatch.reports import HtmlRenderer, write_report
from aitune_dispatch.results import ProfileResult, TensorMeta
from aitune_dispatch.results.views.samples import SAMPLE_COLUMNS, signature
from aitune_dispatch.tracing.samples import SampleCollector


def _call_samples(result: ProfileResult, name: str) -> list[int]:
    calls = result.calls.filter(pc.equal(result.calls["function_name"], name)).sort_by("call_id")
    return calls["sample"].to_pylist()


# -- the tracing contract ---------------------------------------------------------------------------
def test_observe_returns_the_sample_index_or_minus_one_when_not_collected():
    collector = SampleCollector(frozenset({"linear"}))
    a, b = torch.zeros(2, 8), torch.zeros(3, 8)
    # new samples are numbered in order of first appearance; a repeat returns its first index
    assert [collector.observe("linear", (x,), {}) for x in (a, b, a, torch.ones(2, 8))] == [0, 1, 0, 0]
    assert collector.observe("relu", (a,), {}) == -1  # not in function_names: not sampled
    assert [count for count, _ in collector.function_data()["linear"]] == [3, 1]  # a three times (values differ)
    assert "relu" not in collector.function_data()


def test_every_call_row_carries_its_sample_index(mixed_result):
    # inputs of batch 2, 2, 3: sample 0 (batch 2) twice, then sample 1 (batch 3), for every function
    for name in ("linear", "layer_norm", "gelu", "relu"):
        assert _call_samples(mixed_result, name) == [0, 0, 1], name
        ((count0, (args0, _)), (count1, (args1, _))) = mixed_result.function_data[name]
        assert (count0, count1) == (2, 1) and args0[0].shape[0] == 2 and args1[0].shape[0] == 3


def test_calls_outside_function_names_have_no_sample():
    profiler = ModuleFunctionKernelProfiler(function_names={"relu"}, device="cpu")
    result = profiler.profile_result(Mixed().eval(), mixed_samples(), warmup_iterations=0)
    assert _call_samples(result, "relu") == [0, 0, 1]
    assert _call_samples(result, "linear") == [-1, -1, -1]
    assert set(result.samples()["function_name"]) == {"relu"}


def test_torch_level_calls_are_linked_only_when_named():
    class AddMM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.addmm(x, x, self.w).relu()

    samples = mixed_samples()
    named = ModuleFunctionKernelProfiler({"torch.addmm"}, device="cpu", functions="all")
    result = named.profile_result(AddMM(), samples, warmup_iterations=0)
    assert _call_samples(result, "torch.addmm") == [0, 0, 1]
    unnamed = ModuleFunctionKernelProfiler(device="cpu", functions="all")
    assert _call_samples(unnamed.profile_result(AddMM(), samples, warmup_iterations=0), "torch.addmm") == [-1] * 3


# -- samples() --------------------------------------------------------------------------------------
def test_samples_rows_and_counts_equal_function_data(demo_result):
    table = demo_result.samples()
    assert list(table.columns) == SAMPLE_COLUMNS
    expected = {
        (name, i): count for name, entries in demo_result.function_data.items() for i, (count, _) in enumerate(entries)
    }
    assert dict(zip(zip(table["function_name"], table["sample"]), table["calls"])) == expected
    # and each count is the number of call rows linked to that sample
    calls = encoded.decoded(demo_result.calls).to_pandas()
    linked = calls[calls["sample"] >= 0].groupby(["function_name", "sample"]).size().to_dict()
    assert linked == expected


def test_sample_time_adds_up_to_describe(demo_result):
    table = demo_result.samples()
    summary = demo_result.describe(top_k=100).set_index("function_name")
    per_function = table.groupby("function_name")["kernel_us"].sum()
    for name, time_us in summary["time_spent_us"].items():  # every call of the demo is sampled
        assert per_function[name] == pytest.approx(time_us, rel=1e-12), name
    assert table["time_spent_pct"].sum() == pytest.approx(100.0, rel=1e-12)
    assert (table["kernel_us_per_call"] == table["kernel_us"] / table["calls"]).all()
    assert table["kernel_us"].is_monotonic_decreasing


def test_sample_time_is_the_time_of_its_calls(mixed_result):
    table = mixed_result.samples().set_index(["function_name", "sample"])
    activity = encoded.decoded(mixed_result.activity).to_pandas()
    for (name, sample), row in table.iterrows():
        call_ids = _linked_call_ids(mixed_result, name, sample)
        assert row["kernel_us"] == pytest.approx(activity[activity["call_id"].isin(call_ids)]["kernel_us"].sum())
        # the two batch-2 calls ran in one module (fc, norm, or the root for gelu/relu)
        assert row["num_modules"] == 1


def _linked_call_ids(result: ProfileResult, name: str, sample: int) -> list[int]:
    calls = encoded.decoded(result.calls).to_pandas()
    return calls[(calls["function_name"] == name) & (calls["sample"] == sample)]["call_id"].tolist()


def test_signature_is_short_and_shows_strides_when_not_contiguous(mixed_result):
    table = mixed_result.samples().set_index(["function_name", "sample"])
    assert table.loc[("linear", 0), "signature"] == "f32[2,8] f32[8,8] f32[8]"
    # nn.LayerNorm passes them positionally: the function-object hooks key the call as written, the mode
    # as handle_torch_function passes it on
    written = mixed_result.metadata["interception"] == "objects"
    expected = "f32[3,8] (8,) f32[8] f32[8] 1e-05" if written else "f32[3,8] (8,) weight=f32[8] bias=f32[8] eps=1e-05"
    assert table.loc[("layer_norm", 1), "signature"] == expected
    meta = TensorMeta(shape=(2, 3), dtype="float16", stride=(1, 2), device="cuda:0", layout="strided", itemsize=2)
    assert signature(((meta, torch.zeros(4, 2).t(), None), {"dim": -1})) == "f16[2,3]{1,2} f32[2,4]{1,2} None dim=-1"


# -- keep -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["result", "result.parquet"])
def test_save_and_load_keep_the_sample_links(mixed_result, tmp_path, name):
    loaded = load(mixed_result.save(tmp_path / name))
    assert loaded.calls["sample"].to_pylist() == mixed_result.calls["sample"].to_pylist()
    columns = ["function_name", "sample", "calls", "num_modules", "kernel_us", "signature"]
    assert loaded.samples()[columns].equals(mixed_result.samples()[columns])


def test_the_h200_recording_links_every_call_to_its_sample():
    recorded = load(H200_RESULT)
    assert min(recorded.calls["sample"].to_pylist()) >= 0
    # 2 inputs x (conv2d, group_norm, silu + 2 blocks x (2 layer_norm, 4 linear, sdpa, gelu) + linear, softmax)
    # = 2 x (3 + 16 + 2) = 42 calls, each linked
    assert recorded.calls.num_rows == 42
    table = recorded.samples()
    # 24 samples saved: one row each, counts from function_data, every time known
    assert len(table) == 24 and table["calls"].sum() == sum(c for e in recorded.function_data.values() for c, _ in e)
    assert table["kernel_us"].notna().all() and table["num_modules"].notna().all()
    assert not recorded.describe().empty


# -- the report's per-sample table ------------------------------------------------------------------
def test_html_report_lists_the_top_samples(mixed_result, tmp_path):
    page = write_report(mixed_result, tmp_path / "r.html").read_text()
    section = page[page.index('<section id="sample-time">') :]
    section = section[: section.index("</section>")]
    # 4 functions x 2 samples = 8 rows, all under the top 20
    assert section.count("<tr>") == 1 + 8 and "8 of 8 samples" in section
    assert "<code>f32[2,8] f32[8,8] f32[8]</code>" in section


def test_html_sample_table_uses_the_page_unit_and_share_base(demo_result):
    from aitune_dispatch.reports.html import Page

    page = HtmlRenderer().render(demo_result)
    section = page[page.index('<section id="sample-time">') :]
    section = section[: section.index("</section>")]
    unit = Page.of(demo_result, "").unit  # the unit of every other table and of the chart
    assert f"<th class=\"num\">time ({unit.symbol})</th>" in section and f"times in {unit.symbol};" in section
    first = demo_result.samples().iloc[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", section[section.index("<tbody>") :], re.S)[:7]
    # shares of all kernel time, as the page says, not samples()'s share of the profiled functions' time
    assert cells[6] == f"{100 * first.kernel_us / demo_result.total_us:.1f}%"
    assert cells[4] == Page.of(demo_result, "").time(first.kernel_us)
