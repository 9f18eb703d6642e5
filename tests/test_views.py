"""The report views (kernels, modules, unattributed time) and the report's kernel and module tables.

Exact values on a hand-made result (the arithmetic is shown), then the committed H200 demo result:
its HTML report must name its kernels and group its repeated layers.
"""

from __future__ import annotations

import html
import re

import pandas as pd
import pyarrow as pa
import pytest
from fixture_results import layered_result, plain_rows

from aitune_dispatch.reports import HtmlRenderer
from aitune_dispatch.reports.base import human_time, short_kernel_name, time_unit
from aitune_dispatch.reports.html import SECTIONS, module_tree
from aitune_dispatch.results import views
from aitune_dispatch.schema import MODULE_COLUMNS


# -- names ---------------------------------------------------------------------------------------------
def test_layer_pattern_and_groups():
    assert views.layer_pattern("encoder.layers.11.linear1") == "encoder.layers.*.linear1"
    assert views.layer_pattern("") == "" and views.layer_pattern("head") == "head"
    groups = views.module_groups(layered_result())
    # layers.0 / layers.1 share a pattern and a type; a pattern held by one module keeps its name
    assert groups == {
        0: "Net (root)",
        1: "layers",
        2: "layers.*",
        3: "layers.*.fc",
        4: "layers.*",
        5: "layers.*.fc",
        6: "enc",
    }
    assert views.local_name("layers.0.fc", "Linear") == "fc" and views.local_name("", "Net") == "Net (root)"


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
            "CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::"
            "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >"
            "(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1})",
            "elementwise_kernel<128, 2, gpu_kernel_impl_nocast<CUDAFunctor_add<float>>>",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, "
            "float, float const*, float const*, float const*, float*, float*, float*)",
            "vectorized_layer_norm_kernel<float, float, false>",
        ),
        (
            "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
            "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
            "fmha_cutlassF_f32_aligned_64x64_rf_sm80",
        ),
        ("Memset (Device)", "Memset (Device)"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
        ("cpu::aten::addmm", "cpu::aten::addmm"),
    ],
)
def test_short_kernel_names(name, short):
    assert short_kernel_name(name) == short


def test_long_kernel_names_lose_deep_templates_then_their_end():
    name = "void reduce_kernel<512, 1, ReduceOp<float, MeanOps<float, float, float, float>, unsigned int, float, 4>>(x)"
    assert short_kernel_name(name, 60) == "reduce_kernel<512, 1, ReduceOp<float, MeanOps<…>, unsigned…"
    assert len(short_kernel_name("k" * 200)) == 80 and short_kernel_name("k" * 200).endswith("…")


def test_time_units():
    assert [time_unit(us).symbol for us in (999.0, 1_000.0, 2_500_000.0)] == ["µs", "ms", "s"]
    # 3,503,149.3 µs = 3.50 s (the CLI used to print "3503149.3 us")
    assert human_time(3_503_149.3) == "3.50 s" and human_time(12.34) == "12.3 µs" and human_time(1_234.5) == "1.23 ms"
    # a column in ms keeps small values readable: 40.1 µs is 0.040 ms, not 0.0 (or 0.04 ms) ...
    ms, s = time_unit(3_600.0), time_unit(2e6)
    shown = [ms(us, ms.decimals(us)) for us in (1_403.6, 593.2, 40.1, 10.3, 0.0)]
    assert shown == ["1.40", "0.59", "0.040", "0.010", "0.00"]
    # two significant digits as shown, after rounding: 9.96 µs is 0.010 ms (not 0.0100), 99.6 µs 0.10
    assert [ms(us, ms.decimals(us)) for us in (9.96, 9.94, 99.6, 0.996)] == ["0.010", "0.0099", "0.10", "0.0010"]
    assert s(1.0, s.decimals(1.0)) == "0.000001" and time_unit(5.0).decimals(5.0) == 1  # ... at most 6 decimals


# -- views on the hand-made result ------------------------------------------------------------------
def test_kernel_table_groups_repeated_layers():
    table = views.kernel_table(layered_result())
    columns = ["kernel", "op", "function_name", "module", "modules", "calls", "total_us"]
    rows = [(kernel[:9], *rest) for kernel, *rest in plain_rows(table, columns)]
    assert rows == [
        ("void at::", "aten::addmm", "linear", "layers.*.fc", 2, 2, pytest.approx(10.0)),  # 4 + 6 µs
        ("fused", "aten::_transformer_encoder_layer_fwd", None, "enc", 1, 1, pytest.approx(8.0)),
        ("add_k", "aten::add", None, "layers.*", 1, 1, pytest.approx(2.0)),
        ("k", None, None, None, 0, 1, pytest.approx(1.0)),
    ]
    assert table["share"].tolist() == pytest.approx([10 / 21, 8 / 21, 2 / 21, 1 / 21])  # of all kernel time
    assert table["mean_us"][0] == pytest.approx(5.0)  # 10 µs over 2 launches


def test_module_table_in_tree_order_with_members():
    table = views.module_table(layered_result())
    assert list(table.columns) == MODULE_COLUMNS
    rows = [(r.pattern, r.depth, r.instances, r.total_us, r.self_us) for r in table.itertuples()]
    assert rows == [
        ("Net (root)", 0, 1, pytest.approx(20.0), 0.0),  # 21 µs less the 1 µs outside the hierarchy
        ("layers", 1, 1, pytest.approx(12.0), 0.0),  # layers.0 (4) + layers.1 (6 + 2)
        ("layers.*", 2, 2, pytest.approx(12.0), pytest.approx(2.0)),  # the add ran in layers.1 itself
        ("layers.*.fc", 3, 2, pytest.approx(10.0), pytest.approx(10.0)),
        ("enc", 1, 1, pytest.approx(8.0), pytest.approx(8.0)),  # larger than layers? no: 8 < 12, after it
    ]
    assert table["members"][3] == [("layers.1.fc", pytest.approx(6.0)), ("layers.0.fc", pytest.approx(4.0))]
    assert table["share"][0] == pytest.approx(20 / 21)


def test_module_table_keeps_the_top_call_of_own_and_inclusive_time_apart():
    table = views.module_table(layered_result()).set_index("pattern")
    # the root launched nothing itself: its inclusive top call is its descendants' linear (10 of 20 µs)
    assert table.loc["Net (root)", "top_function"] == "linear"
    assert table.loc["Net (root)", "top_function_us"] == pytest.approx(10.0)
    assert pd.isna(table.loc["Net (root)", "top_self_function"])
    assert table.loc["Net (root)", "top_self_function_us"] == 0
    # layers.* ran only a raw add itself (no functional call), its children ran linear
    assert table.loc["layers.*", "top_function"] == "linear" and pd.isna(table.loc["layers.*", "top_self_function"])
    assert table.loc["layers.*.fc", "top_self_function"] == "linear"
    assert table.loc["layers.*.fc", "top_self_function_us"] == pytest.approx(10.0)
    # a call's time never exceeds the time it is picked from
    assert (table["top_function_us"] <= table["total_us"] + 1e-9).all()
    assert (table["top_self_function_us"] <= table["self_us"] + 1e-9).all()


def test_module_table_names_the_dominant_inclusive_call_on_the_h200_demo(h200_result):
    table = views.module_table(h200_result).set_index("pattern")
    by_function = h200_result.profiling_df().groupby("function_name")["kernel_us"].sum()
    root = table.iloc[0]
    assert root["top_function"] == by_function.idxmax()  # linear, not the root's own softmax
    assert root["top_function_us"] == pytest.approx(by_function.max(), rel=1e-6)
    assert table.loc["blocks.*", "top_function"] == "linear"
    assert table.loc["blocks.*", "top_self_function"] == "scaled_dot_product_attention"
    strings = ["pattern", "module_type", "parent", "top_function", "top_self_function"]
    assert {str(table.reset_index()[c].dtype) for c in strings} == {str(pd.Series(["a"]).dtype)}


def test_unattributed_table_says_why_and_what_to_do():
    table = views.unattributed_table(layered_result())
    assert plain_rows(table, ["reason", "op", "module", "kernels", "total_us"]) == [
        ("fast_path", "aten::_transformer_encoder_layer_fwd", "enc", 1, pytest.approx(8.0)),
        ("raw_op", "aten::add", "layers.*", 1, pytest.approx(2.0)),  # layers.1, grouped with its twin
        ("outside_modules", None, None, 1, pytest.approx(1.0)),
    ]
    assert "fast path" in table["why"][0] and "set_fastpath_enabled(False)" in table["hint"][0]
    assert 'functions="all"' in table["hint"][1] and "raw torch op" in table["why"][1]
    # with functions="all" already on, the hint no longer suggests it
    again = views.unattributed_table(layered_result({"functions": "all"}))
    assert "was on" in again["hint"][1]


def test_unattributed_graph_replays_and_compiled_kernels_have_their_own_reasons():
    import dataclasses

    result = layered_result()
    activity = result.activity
    # the add of layers.1 was a replay of a graph captured unseen; the fast-path op's kernel an Inductor kernel
    op = activity["op"].to_pylist()
    kernel = activity["kernel"].to_pylist()
    op[op.index("aten::add")] = "cudaGraphLaunch"
    fused = op.index("aten::_transformer_encoder_layer_fwd")
    op[fused], kernel[fused] = None, "triton_poi_fused_gelu_0"
    for name, values in (("op", op), ("kernel", kernel)):
        activity = activity.set_column(activity.schema.get_field_index(name), name, pa.array(values, pa.string()))
    table = views.unattributed_table(dataclasses.replace(result, activity=activity))
    assert plain_rows(table, ["reason", "module", "kernels"]) == [
        ("compiled", "enc", 1),
        ("graph_replay", "layers.*", 1),
        ("outside_modules", None, 1),
    ]
    assert "torch._dynamo.reset()" in table["hint"][0] and "captured inside the profiled function" in table["hint"][1]


def test_headline_counts():
    head = views.headline(layered_result())
    # attributed: the two gemms (10 µs) of 21 µs; 4 distinct kernel names (the gemm twice)
    assert (head.activity_rows, head.attributed_rows, head.kernels) == (5, 2, 4)
    assert head.coverage == pytest.approx(10 / 21) and head.top_functions == (("linear", pytest.approx(10.0)),)


# -- the HTML report's tables ---------------------------------------------------------------------------
def cells(page: str, css: str) -> list[list[str]]:
    body = re.search(rf'<table class="{css}">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert body is not None, f"no {css} table"
    shown = re.sub(r'<code class="full">.*?</code>', "", body.group(1), flags=re.S)  # what a closed cell shows
    rows = re.findall(r"<tr>(.*?)</tr>", shown, re.S)
    strip = lambda cell: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell.replace("<wbr>", ""))).split())  # noqa: E731
    return [[strip(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)] for row in rows]


def test_report_explains_low_coverage():
    page = HtmlRenderer().render(layered_result())
    rows = cells(page, "coverage")
    assert [r[:3] for r in rows] == [
        ["aten::_transformer_encoder_layer_fwd", "enc", "1"],
        ["aten::add", "layers.*", "1"],
        ["—", "—", "1"],
    ]
    assert "a fused fast-path op" in rows[0][5] and "set_fastpath_enabled(False)" in rows[0][5]
    assert 'functions="all"' in html.unescape(rows[1][5])
    assert "11.0 µs of 21.0 µs kernel time (52.4%)" in html.unescape(page)  # 8 + 2 + 1 = 11 of 21


def test_report_module_tree_labels_are_local_names():
    tree = module_tree(layered_result())
    (root,) = [c for c in tree["children"] if c["kind"] == "module"]
    layers = root["children"][0]
    assert (layers["name"], layers["path"]) == ("layers", "layers")
    assert [(c["name"], c["path"]) for c in layers["children"]] == [("0", "layers.0"), ("1", "layers.1")]
    assert (layers["children"][0]["children"][0]["name"], layers["children"][0]["children"][0]["path"]) == (
        "fc",
        "layers.0.fc",
    )


def test_h200_demo_result_renders_kernel_and_module_tables(h200_result):
    result = h200_result
    page = HtmlRenderer().render(result)
    kernels = cells(page, "kernels")
    expected = views.kernel_table(result)
    assert len(expected) == 30  # 21 distinct kernels; some launched by several (op, call, module) groups
    assert len(kernels) == 15 and len(cells(page, "kernels-more")) == 15  # the rest behind "15 more"
    top = expected.iloc[0]
    assert top["kernel"].startswith("fmha_cutlassF")  # the attention kernel takes the most time
    assert kernels[0][:5] == [
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80",
        "aten::_scaled_dot_product_efficient_attention",
        "scaled_dot_product_attention",
        "blocks.*",
        "4",  # 2 blocks x 2 samples
    ]
    assert f'title="{html.escape(top["kernel"])}"' in page  # the full name on hover
    modules = {row[0]: row for row in cells(page, "modules")}
    assert {"DemoModel (root)", "blocks.* ×2", "blocks.*.qkv ×2", "stem.0", "head"} <= {
        name.split(" blocks.")[0] if "×" in name else name for name in modules
    }
    qkv = next(row for name, row in modules.items() if name.startswith("blocks.*.qkv ×2"))
    assert "blocks.0.qkv" in qkv[0] and "blocks.1.qkv" in qkv[0]  # the grouped instances, expandable
    assert 'id="coverage"' in page and "aten::add" in page.replace("<wbr>", "")  # the residual adds: unattributed


def test_sections_can_be_chosen(h200_result):
    only = HtmlRenderer(sections=(SECTIONS[0], SECTIONS[3])).render(h200_result)
    assert 'id="kernels"' in only and 'id="module-table"' not in only and 'id="bar-chart"' not in only


def test_a_fast_path_encoder_is_explained():
    torch = pytest.importorskip("torch")
    from aitune_dispatch import ModuleFunctionKernelProfiler

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).eval()
    with pytest.warns(RuntimeWarning, match="^profiling_df is empty"):  # said, with what to do
        result = ModuleFunctionKernelProfiler(device="cpu").profile_result(
            model, [((torch.randn(2, 8, 32),), {})], warmup_iterations=0
        )
    # in eval mode without grad each layer runs one fused op, which no functional call encloses
    assert result.coverage == 0.0
    (row,) = views.unattributed_table(result).itertuples()  # the twelve layers are one row
    assert (row.reason, row.op, row.module, row.kernels) == (
        "fast_path",
        "aten::_transformer_encoder_layer_fwd",
        "layers.*",
        12,
    )
    assert row.share == pytest.approx(1.0)
    modules = views.module_table(result).set_index("pattern")
    assert modules.loc["layers.*", "instances"] == 12 and modules.loc["layers.*", "share"] == pytest.approx(1.0)
    page = HtmlRenderer().render(result)
    assert "a fused fast-path op" in page and '<code>layers.*</code> <span class="note">×12' in page  # expandable


def test_run_metadata_in_words(h200_result):
    from aitune_dispatch.reports.html import metadata_rows

    rows = dict(metadata_rows(h200_result))
    # seconds_pass "0.008356" s = 8.356 ms; seconds_start "0.006628" s = 6.628 ms
    assert h200_result.metadata["seconds_pass"] == "0.008356" and h200_result.metadata["seconds_start"] == "0.006628"
    assert rows["the recorded pass"] == "8.36 ms"
    assert rows["starting the activity collector and the tracer"] == "6.63 ms"
    assert (
        rows["device"] == "CUDA GPU" and rows["PyTorch"] == "2.11.0+cu130" and rows["activity source"] == "cupti/native"
    )
    assert "seconds_pass" not in rows  # no raw keys where words exist


def test_every_metadata_key_is_in_words(demo_result):
    from aitune_dispatch import schema
    from aitune_dispatch.reports.html import METADATA_WORDS, metadata_rows

    names = vars(schema).items()
    declared = {v for k, v in names if (k.startswith("META_") or k.endswith("_KEY")) and isinstance(v, str)}
    declared |= {schema.seconds_key(phase) for phase in schema.PHASES}
    assert declared - set(METADATA_WORDS) == set()  # a key added to schema.py needs its words in the report
    # a fresh CPU run's Run section: no raw key (seconds_warmup, decoder, graph_capture used to show raw)
    assert set(demo_result.metadata) - set(METADATA_WORDS) == set()
    labels = [label for label, _ in metadata_rows(demo_result)]
    assert len(labels) == len(set(labels)) == len(demo_result.metadata) + 3  # plus source, dropped, schema
    assert "the warm-up passes" in labels and "tracer" not in labels  # the tracer shows once, as "aten op tracer"
