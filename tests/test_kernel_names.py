"""Kernel short names (``results.views.kernel_names``) and where they show: the kernel views' last column,
the CLI's tables (never cut below 40 characters at 80 columns; ``--full-names``) and the HTML report."""

from __future__ import annotations

import contextlib
import html
import io
import re

import pandas as pd
import pytest
from fixture_results import H200_RESULT

from aitune_dispatch import load, schema
from aitune_dispatch.cli import main
from aitune_dispatch.reports import HtmlRenderer
from aitune_dispatch.reports.base import kernel_labels
from aitune_dispatch.results import views
from aitune_dispatch.results.views import kernel_names
from aitune_dispatch.results.views.kernel_names import short_name, short_names

# demangled names as torch.profiler, nsys and our results show them, with the base name nsys calls the short name
REAL_NAMES = [
    (  # at::native elementwise, a functor among the template arguments
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
        "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
        "vectorized_elementwise_kernel",
    ),
    (  # lambdas, operator() and const inside the template arguments
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_"
        "cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
        "{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#3}::"
        "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, "
        "at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}"
        "::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, "
        "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
        "operator()() const::{lambda(float)#1} const&)::{lambda(int)#1})",
        "elementwise_kernel",
    ),
    (  # reduce, nested templates
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
        "float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
        "float>, unsigned int, float, 4, 4>)",
        "reduce_kernel",
    ),
    (  # (anonymous namespace)
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float "
        "const*, float const*, float const*, float*, float*, float*)",
        "vectorized_layer_norm_kernel",
    ),
    (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 4, false, false>(float*, float const*, "
        "int, int, int, bool const*, int, bool)",
        "softmax_warp_forward",
    ),
    (  # cutlass 2 and 3
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_tn_align1>(cutlass_80_simt_sgemm_64x64_8x5_tn_align1"
        "::Params)",
        "Kernel2",
    ),
    (
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, cutlass::"
        "gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, cute::tuple<cute::C<1>, "
        "cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecializedCooperative>, cute::tuple<cute::C<128>, "
        "cute::C<128>, cute::C<64> > >, void> >(cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, "
        "int>, void>::Params)",
        "device_kernel",
    ),
    (  # a C function with a C++ parameter type: the memory-efficient attention kernel
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, "
        "true, 64, 64, 64, true, true>::Params)",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80",
    ),
    (  # flash attention
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
        "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
        "flash_fwd_kernel",
    ),
    (  # cudnn, cublas, cublasLt
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, float const*, "
        "cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, "
        "float)",
        "bn_fw_tr_1C11_kernel_NCHW",
    ),
    (
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, "
        "true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float*, float "
        "const*, float const*, float const*, float const*, float*, void*, long, float*, int*, float*, float*, float "
        "const*, float const*, float const*, float const*, float const*)",
        "splitKreduce_kernel",
    ),
    (
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<"
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float>, float>)",
        "gemmSN_TN_kernel",
    ),
    (  # a function pointer among the template arguments
        "void at::native::apply_kernel<&at::native::silu_fn, void (*)(float const*, float*), 256>(float const*, "
        "float*, int)",
        "apply_kernel",
    ),
    (  # a comparison inside a template argument is no closing bracket
        "void topk::radixFindKthValues<float, unsigned int, unsigned int, (2>1)>(at::cuda::detail::TensorInfo<float, "
        "unsigned int>, unsigned int)",
        "radixFindKthValues",
    ),
    (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    ),
    # operators: a functor's call operator, a templated operator
    ("at::native::(anonymous namespace)::AddFunctor<float>::operator()(float, float) const", "operator()"),
    ("bool std::operator< <int>(std::vector<int> const&, std::vector<int> const&)", "operator<"),
    ("void at::native::operator<<(std::ostream&, at::native::Foo const&)", "operator<<"),
    # a kernel named by a lambda: said with the function it belongs to
    ("at::native::(anonymous namespace)::launch_it(int)::{lambda(int)#1}", "launch_it::{lambda(int)#1}"),
    # not C++: kept as they are
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4",) * 2,
    ("triton_poi_fused_add_0",) * 2,
    ("triton_per_fused__softmax_native_layer_norm_1",) * 2,
    ("nvjet_tst_128x64_64x6_1x1_v_bz_coopA_NNT",) * 2,
    ("ampere_sgemm_128x64_tn",) * 2,
    ("Memset (Device)",) * 2,
    ("Memcpy HtoD (Pageable -> Device)",) * 2,
    ("cpu::aten::addmm",) * 2,
]


@pytest.mark.parametrize(("name", "expected"), REAL_NAMES, ids=[short for _, short in REAL_NAMES])
def test_the_short_name_of_real_kernel_names(name, expected):
    assert short_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "void k<a<b>(int)",  # unbalanced
        "void (*make_kernel(int))(float)",  # returns a function pointer: no base name to take
        "void f(int",
        "<<<>>>",
        ")(",
        "::",
        "",
    ],
)
def test_a_name_it_cannot_read_comes_back_whole(name):
    assert short_name(name) == name


def test_no_prefix_of_a_real_name_makes_it_raise():
    for name, _ in REAL_NAMES:
        for end in range(len(name) + 1):  # every truncation: unbalanced brackets, half an operator, a bare "::"
            shown = short_name(name[:end])
            assert isinstance(shown, str) and (shown or not name[:end].strip()), name[:end]


def test_short_names_parses_each_distinct_name_once(monkeypatch):
    calls = []
    parse = kernel_names._base_name
    monkeypatch.setattr(kernel_names, "_base_name", lambda text: calls.append(text) or parse(text))
    kernel_names._short_name.cache_clear()
    names = [name for name, _ in REAL_NAMES[:3]] * 1000 + [None, float("nan")]
    index = pd.RangeIndex(10, 10 + len(names))
    shorts = short_names(pd.Series(names, index=index, dtype=object))
    assert len(calls) == 3  # 3,002 rows, 3 distinct names
    assert list(shorts.index) == list(index)
    assert list(shorts[:3]) == [short for _, short in REAL_NAMES[:3]] and shorts.iloc[-2:].isna().all()
    kernel_names._short_name.cache_clear()


def test_the_kernel_views_end_with_the_short_name(h200_result):
    frames = {
        "kernel_rollup": (views.kernel_rollup(h200_result), schema.ROLLUP_COLUMNS),
        "kernel_table": (views.kernel_table(h200_result), schema.KERNEL_COLUMNS),
        "kernel_origins": (views.kernel_origins(h200_result), schema.ORIGIN_COLUMNS),
    }
    for view, (frame, columns) in frames.items():
        assert list(frame.columns) == columns and columns[-1] == "short_name", view  # after every other column
        assert list(frame["short_name"]) == [short_name(k) for k in frame["kernel"]], view
    assert schema.ROLLUP_COLUMNS[:-1] == ["kernel", "kind", "count", "total_us", "mean_us", "min_us", "max_us", "share"]


def test_kernel_labels_tell_apart_kernels_that_share_a_short_name():
    add, copy = REAL_NAMES[0][0], REAL_NAMES[0][0].replace("CUDAFunctor_add", "CUDAFunctor_mul")
    gemm = REAL_NAMES[5][0]
    labels = kernel_labels([add, copy, gemm, add], [short_name(k) for k in (add, copy, gemm, add)])
    assert labels[2] == "Kernel2"  # unique: its short name
    assert labels[0] == labels[3] != labels[1]  # the same kernel reads the same, the other differently
    assert all(label.startswith("vectorized_elementwise_kernel<") for label in labels[:2])
    with pytest.raises(ValueError, match="one short name per kernel"):
        kernel_labels([add], [])


# -- the CLI ---------------------------------------------------------------------------------------------
def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue()


def _table(lines: list[str], title: str) -> tuple[str, str, list[str]]:
    """The title (its wrapped lines joined), the header line and the row lines of the table under the line
    starting with ``title``, up to a blank line or a note (``no noise estimate: ...``)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rule = next(i for i in range(start, len(lines)) if lines[i].startswith("---"))
    end = next((i for i in range(rule + 1, len(lines)) if not lines[i].strip() or "estimate:" in lines[i]), len(lines))
    return " ".join(" ".join(lines[start : rule - 1]).split()), lines[rule - 1], lines[rule + 1 : end]


def _column(lines: list[str], title: str, index: int) -> str:
    """The text of column ``index`` of that table over all its lines (a folded name's lines in a row)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rule = next(i for i in range(start, len(lines)) if lines[i].startswith("---"))
    begin, end = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rule])][index]
    return "".join(line[begin:end] for line in _table(lines, title)[2])


def _labels(result, top: int) -> list[str]:
    rollup = result.kernel_rollup()
    return kernel_labels(list(rollup["kernel"]), list(rollup["short_name"]), 120)[:top]


@pytest.mark.parametrize("columns", [80, 100])
def test_report_keeps_40_characters_of_each_kernel_name(columns, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.chdir(H200_RESULT.parent)
    code, stdout = _run(["report", H200_RESULT.name, "--top", "all", "-q"])
    assert code == 0
    lines = stdout.splitlines()
    assert all(len(line) <= columns for line in lines), [line for line in lines if len(line) > columns]
    result = load(H200_RESULT)
    title, header, rows = _table(lines, "top kernels (")
    labels = _labels(result, len(rows))
    assert len(rows) == len(result.kernel_rollup())
    for row, label in zip(rows, labels, strict=True):
        shown = re.split(r"\s{2,}", row)[0]
        assert len(shown) >= min(40, len(label)), (shown, label)  # never cut below 40 characters
        assert shown == label or (shown.endswith("\u2026") or "\u2026" in shown) and len(shown) >= 40, (shown, label)
    left_out = [name for name in ("mean", "top module", "top call") if not re.search(rf"\b{name}\b", header)]
    assert left_out, header  # the kernel table does not fit whole at this width ...
    assert f"left out to fit {columns} columns" in title and all(name in title for name in left_out), title
    assert "top call" in header  # ... and what goes first is the mean, then the module pattern


def test_compare_keeps_40_characters_of_each_kernel_name_at_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, stdout = _run(["compare", str(H200_RESULT), str(H200_RESULT), "--top", "all"])
    assert code == 0
    lines = stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    table = views.compare(load(H200_RESULT), load(H200_RESULT))
    kernels = list(table[table["level"] == "kernel"]["kernel"])
    labels = kernel_labels(kernels, list(short_names(kernels)), 120)
    _, _, rows = _table(lines, "per kernel, largest change first")
    assert len(rows) == len(kernels)
    for row, label in zip(rows, labels):
        shown = re.split(r"\s{2,}", row)[1]
        assert len(shown) >= min(40, len(label)), (shown, label)


@pytest.mark.parametrize("argv", [["report", str(H200_RESULT), "-q"], ["compare", str(H200_RESULT), str(H200_RESULT)]])
def test_full_names_shows_every_full_kernel_name(argv, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    code, short = _run([*argv, "--top", "5"])
    code_full, full = _run([*argv, "--top", "5", "--full-names"])
    assert code == code_full == 0
    result = load(H200_RESULT)
    if argv[0] == "report":
        title, column, top = "top kernels (", 0, list(result.kernel_rollup(top=5)["kernel"])
    else:
        table = views.compare(result, result)
        title, column, top = "per kernel", 1, list(table[table["level"] == "kernel"]["kernel"].head(5))
    shown = "".join(_column(full.splitlines(), title, column).split())  # folded: the name, less its spaces
    assert all("".join(name.split()) in shown for name in top), shown
    cut = "".join(_column(short.splitlines(), title, column).split())
    assert not any("".join(name.split()) in cut for name in top if len(name) > 100)  # short names without it
    assert all(len(line) <= 100 for line in full.splitlines())


def test_full_names_is_an_option_of_every_command_that_prints_kernels(capsys):
    for command in ("report", "demo", "profile", "compare"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--full-names" in capsys.readouterr().out, command


# -- the HTML report ---------------------------------------------------------------------------------------
def test_the_html_report_shows_short_names_and_carries_the_full_ones(h200_result):
    page = HtmlRenderer().render(h200_result)
    rollup = views.kernel_rollup(h200_result)
    body = re.search(r'<table class="kernel-rollup">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    labels = kernel_labels(list(rollup["kernel"]), list(rollup["short_name"]))
    for row, kernel, label in zip(rows, rollup["kernel"], labels):
        cell = re.search(r"<td[^>]*>(.*?)</td>", row, re.S).group(1)
        text = lambda fragment: html.unescape(re.sub(r"<[^>]+>", "", fragment.replace("<wbr>", "")))  # noqa: E731
        assert html.unescape(re.search(r'title="([^"]*)"', cell).group(1)) == kernel  # the full name on hover
        if label == kernel:
            assert text(cell) == kernel
            continue
        summary = re.search(r"<summary>(.*?)</summary>", cell, re.S)
        full = re.search(r'<code class="full">(.*?)</code>', cell, re.S)
        assert summary and full, cell  # a click on the short name opens the full one
        assert text(summary.group(1)) == label and text(full.group(1)) == kernel
