"""Every renderer against every shared result (tests/fixture_results.py), as pyinstrument tests its renderers.

The renderers are the file formats of ``reports.RENDERERS`` (picked by ``renderer_for``), the
terminal tables of ``reports.text`` (and ``reports.ranks`` for merges) and the notebook view. Each
must render each result, say the same numbers the views compute, and render the same input to the
same output.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from html.parser import HTMLParser

import pytest
from fixture_results import empty_result, layered_result, merged_result, synthetic_result

from aitune_dispatch.reports import RENDERERS, TextRenderer, renderer_for, text
from aitune_dispatch.reports.base import human_time
from aitune_dispatch.reports.html import notebook_html
from aitune_dispatch.reports.ranks import rank_text
from aitune_dispatch.results import ProfileResult, views

pytestmark = pytest.mark.single_backend  # the results are built once; no tracing backend involved

RESULTS: dict[str, Callable[[pytest.FixtureRequest], ProfileResult]] = {
    "demo": lambda request: request.getfixturevalue("demo_result"),
    "h200": lambda request: request.getfixturevalue("h200_result"),
    "h200_launches": lambda request: request.getfixturevalue("h200_launches_result"),
    "synthetic": lambda request: synthetic_result(),
    "layered": lambda request: layered_result(),
    "empty": lambda request: empty_result(),
    "merged": lambda request: merged_result(),
}


@pytest.fixture(params=sorted(RESULTS))
def result(request: pytest.FixtureRequest) -> ProfileResult:
    return RESULTS[request.param](request)


class _Balanced(HTMLParser):
    """Counts open minus closed tags of the elements that must be closed."""

    CLOSED = {"table", "section", "div", "details", "script", "style"}

    def __init__(self) -> None:
        super().__init__()
        self.depth = {tag: 0 for tag in self.CLOSED}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.depth:
            self.depth[tag] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.depth:
            self.depth[tag] -= 1


def _check_html(page: str, result: ProfileResult) -> None:
    parser = _Balanced()
    parser.feed(page)
    assert set(parser.depth.values()) == {0}, parser.depth
    names = re.findall(r"<code[^>]*>([^<]*)</code>", page.replace("<wbr>", ""))  # break points left out
    for name in result.describe(top_k=3)["function_name"]:
        assert html.escape(name) in names, name
    assert ('<section id="ranks">' in page) == ("rank" in result.activity.column_names)  # merges only


def _check_trace(page: str, result: ProfileResult) -> None:
    trace = json.loads(page)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # every activity row is one slice (the CPU source's rows are their ops' slices), every op is one too
    kernels = [e for e in slices if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(kernels) == sum(count for kind, count in views.activity_kinds(result).items() if kind != "cpu_op")
    assert trace["otherData"]["source"] == result.source


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda r: r.__name__)
def test_every_file_renderer_renders_every_result(renderer, result, tmp_path):
    page = renderer().render(result)
    assert page == renderer().render(result)  # deterministic
    (_check_html if renderer.extension == ".html" else _check_trace)(page, result)
    path = tmp_path / f"out{renderer.extension}"
    assert isinstance(renderer_for(path), renderer)
    assert renderer_for(path).write(result, path).stat().st_size > 0


def test_the_terminal_tables_render_every_result(result):
    summary = text.summary_text(result, top_k=5, width=80)
    assert all(len(line) <= 80 for line in summary.splitlines())
    assert " ".join(text.coverage_line(result).split()) in " ".join(summary.split())  # wrapped to fit
    if result.activity.num_rows:
        assert human_time(result.total_us) in summary
    for name in result.describe(top_k=5)["function_name"]:
        assert name[:8] in summary  # the function column may be cut to fit
    hints = text.unattributed_text(result, width=80)
    assert bool(hints) == (views.unattributed(result.activity).num_rows > 0)
    for line in hints.splitlines():  # a missing op or module is named in words, never as pandas' NaN
        assert not re.search(r"\bnan\b", line), line
    assert bool(rank_text(result, width=80)) == ("rank" in result.activity.column_names)  # merges only


def test_the_text_renderer_is_the_terminal_summary(result, tmp_path):
    renderer = TextRenderer(top_k=5, width=80, title="a title")
    page = renderer.render(result)
    hints = text.unattributed_text(result, width=80)
    head = "\n".join(["a title", text.summary_text(result, 5, 80), *([hints] if hints else [])])
    kernels = text.kernels_text(result, 5, 80)
    worth = text.worth_text(result, 5, 80)
    body = [head, *(["", kernels] if kernels else []), "", text.gpu_time_text(result, 5, 80)]
    assert page == "\n".join([*body, *(["", worth] if worth else [])])
    assert renderer.write(result, tmp_path / "summary.txt").read_text() == page
    assert TextRenderer not in RENDERERS  # the terminal's renderer, not a file format the CLI picks by name


def test_the_notebook_view_renders_every_result(result):
    page = notebook_html(result)
    assert page == result._repr_html_() and "<script" not in page
    head = views.headline(result)
    assert f"{head.activity_rows:,} activity rows" in page and result.source in page
