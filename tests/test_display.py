"""Notebook display, the logger, and docstrings of the public API (the README's snippets: tests/test_docs.py)."""

from __future__ import annotations

import inspect
import logging
import re
from pathlib import Path

import pytest

import aitune_dispatch
from aitune_dispatch.results import views

ROOT = Path(__file__).resolve().parents[1]


def test_repr_is_one_short_line(h200_result):
    result = h200_result
    text = repr(result)
    assert "\n" not in text and len(text) < 300  # the dataclass repr was 9,070 characters
    # 82 rows, 21 kernel names, 215.6 of 233.6 µs attributed = 92.3 %, linear the largest at 112.3 µs
    assert text.startswith("<ProfileResult source=cupti/native, device=cuda: 82 activity rows, 21 distinct kernels")
    assert "coverage 92.3% of 233.6 us" in text and "top: linear 112.3 us, layer_norm 35.7 us" in text


def test_repr_html_shows_summary_and_coverage(h200_result):
    result = h200_result
    page = result._repr_html_()
    assert "<script" not in page and page.startswith('<div class="aitune-nb">')
    assert "coverage 92.3%" in page and "233.6 µs kernel time" in page
    for name in result.describe(8)["function_name"]:
        assert f"<code>{name}</code>" in page
    assert "aten::add" in page.replace("<wbr>", "") and "functions=&quot;all&quot;" in page  # what, and the fix


def test_phases_and_backends_are_logged(caplog):
    from aitune_dispatch import ModuleFunctionKernelProfiler
    from aitune_dispatch.demo import demo_workload

    model, samples = demo_workload("cpu")
    with caplog.at_level(logging.DEBUG, logger="aitune_dispatch"):
        ModuleFunctionKernelProfiler(device="cpu").profile_result(model, samples[:1], warmup_iterations=0)
    ours = [r for r in caplog.records if r.name.startswith("aitune_dispatch")]
    messages = [r.getMessage() for r in ours]
    assert any(m.startswith("activity source: CPU op timer; tracer: ") for m in messages)
    assert {m.split(":")[0] for m in messages if m.startswith("phase ")} == {
        f"phase {p}" for p in ("start", "pass", "flush", "decode", "join")
    }
    assert any(re.match(r"recorded \d+ activity rows \(cpu source, \w+ tracer\)", m) for m in messages)
    assert logging.getLogger("aitune_dispatch").handlers  # a NullHandler: silent unless configured


def _exported():
    """Each function and class in the ``__all__`` of the package, of reports and of views, and their methods."""
    from aitune_dispatch import reports

    for module in (aitune_dispatch, reports, views):
        for name in module.__all__:
            item = getattr(module, name)
            if inspect.isclass(item) or inspect.isfunction(item):
                yield from _with_methods(item)


def _with_methods(item):
    """``item``, then (for a class) every public method it defines."""
    yield item
    if inspect.isclass(item):
        for attribute, member in vars(item).items():
            member = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if not attribute.startswith("_") and inspect.isfunction(member):
                yield member


def _public_callables():
    from aitune_dispatch import reports, results

    yield from dict.fromkeys(_exported())  # once each (describe_results is exported and a profiler method)
    yield from (results.save_result, reports.write_report, reports.write_perfetto, reports.renderer_for)
    yield from (reports.perfetto_events, reports.HtmlRenderer, reports.PerfettoRenderer)
    yield from (views.kernel_table, views.module_table, views.unattributed_table, views.headline)
    from aitune_dispatch.results import persist
    from aitune_dispatch.results.views import ranks, split

    yield from (aitune_dispatch.merge, ranks.select_rank, persist.rank_result_paths, results.load, split.describe_by)
    yield from (ranks.compare_ranks, ranks.rank_summary, ranks.function_ranks, ranks.collectives)


@pytest.mark.parametrize("item", list(_public_callables()), ids=lambda i: getattr(i, "__qualname__", str(i)))
def test_public_api_has_parameters_and_returns(item):
    doc = inspect.getdoc(item) or ""
    if inspect.isclass(item):
        assert "Parameters" in doc or "Attributes" in doc, item
    else:
        wanted = set(inspect.signature(item).parameters) - {"self", "cls"}
        assert "Returns\n-------" in doc and ("Parameters\n----------" in doc or not wanted), item
        documented = set(re.findall(r"^(\w+(?:, \w+)*):$", doc, re.M))
        names = {n for line in documented for n in line.split(", ")}
        assert wanted <= names, (item, wanted - names)
