"""The HTML comparison page (reports/comparison.py) and ``compare --html``: every row compare() computed,
its per-step change and 95% interval as compare() gave them, rows outside the noise marked and the others
not, the note where a side has one step, names escaped, and the file written as every report is.

The results are compare's synthetic ones (tests/test_compare.py); each expected value is read from
``compare()`` itself, never written down, so the page is checked against the view it renders.
"""

from __future__ import annotations

import dataclasses
import html
import io
import os
from contextlib import redirect_stderr, redirect_stdout
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fixture_results import synthetic_result
from test_compare import AFTER, BEFORE, _result, _stepped
from test_write_failures import SmallDisk

from aitune_dispatch import cli
from aitune_dispatch.reports import ComparisonRenderer, write_comparison
from aitune_dispatch.reports.base import kernel_labels
from aitune_dispatch.results import ProfileResult, compare, load
from aitune_dispatch.results.views import short_names

pytestmark = pytest.mark.single_backend  # hand-made results; no tracing backend involved

EVIL_KERNEL = "void gemm<float, 4>(T&, U*) <script>alert(1)</script> & more"
EVIL_FUNCTION = "fc<b>&amp;</b>"


# -- reading the page ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Cell:
    attrs: dict[str, str | None]
    text: str = ""
    titles: list[str] = dataclasses.field(default_factory=list)  # title attributes inside the cell

    @property
    def key(self) -> str | None:
        return self.attrs.get("data-sort")


@dataclasses.dataclass
class Row:
    css: str
    cells: list[Cell]


class Tables(HTMLParser):
    """The body rows of every ``<table class="compare-...">``, by the table's class."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[Row]] = {}
        self.headers: dict[str, list[str]] = {}
        self._table: str | None = None
        self._row: Row | None = None
        self._cell: Cell | None = None
        self._th: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "table" and (found.get("class") or "").startswith("compare-"):
            self._table = found["class"]
            self.tables[self._table], self.headers[self._table] = [], []
        elif self._table and tag == "tr":
            self._row = Row(found.get("class") or "", [])
        elif self._row is not None and tag == "td":
            self._cell = Cell(found)
        elif self._table and tag == "th":
            self._th = []
        elif self._cell is not None and "title" in found:
            self._cell.titles.append(found["title"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._cell.text = self._cell.text.strip()
            self._row.cells.append(self._cell)
            self._cell = None
        elif tag == "th" and self._th is not None and self._table:
            self.headers[self._table].append("".join(self._th).strip())
            self._th = None
        elif tag == "tr" and self._row is not None and self._table:
            if self._row.cells:  # body rows only (the header row has th cells)
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.text += data
        elif self._th is not None:
            self._th.append(data)


def read(page: str) -> Tables:
    parser = Tables()
    parser.feed(page)
    return parser


def page_rows(tables: Tables, level: str) -> list[Row]:
    """``level``'s rows, those behind "show more" included."""
    return tables.tables.get(f"compare-{level}", []) + tables.tables.get(f"compare-{level}-more", [])


def us_text(value: float, signed: bool = False) -> str:
    """A time as the page writes it in µs (every synthetic time is below 1 ms): 2 decimals below 10 µs."""
    text = f"{value:,.{2 if abs(value) < 10 else 1}f}"
    return f"+{text}" if signed and value > 0 and text.strip("0.,") else text


def row_key(row: Any, level: str) -> tuple[str, str | None]:
    function = row.function_name if isinstance(row.function_name, str) else ""
    return function, (row.kernel if level == "kernel" else None)


def cell_key(cells: list[Cell], level: str) -> tuple[str, str | None]:
    function = cells[0].key or ""
    return function, (cells[1].titles[0] if level == "kernel" else None)


# -- results -----------------------------------------------------------------------------------------------
def stepped_pair(kernel: str = "gemm", function: str = "linear") -> tuple[ProfileResult, ProfileResult]:
    """8 steps a side: ``kernel`` doubles (outside the noise), ``bias`` stays (inside it), noise N(0, 1) us."""
    rng = np.random.default_rng(1)
    before = _stepped([{kernel: 10 + rng.normal(0, 1), "bias": 5 + rng.normal(0, 1)} for _ in range(8)])
    after = _stepped([{kernel: 20 + rng.normal(0, 1), "bias": 5 + rng.normal(0, 1)} for _ in range(8)])
    if function != "linear":
        before, after = (renamed(result, function) for result in (before, after))
    return before, after


def renamed(result: ProfileResult, function: str) -> ProfileResult:
    """``result`` with every activity row's functional call renamed ``function``."""
    import pyarrow as pa

    activity = result.activity
    index = activity.schema.get_field_index("function_name")
    field = activity.schema.field(index)
    names = pa.array([function] * activity.num_rows, pa.string()).dictionary_encode().cast(field.type)
    return dataclasses.replace(result, activity=activity.set_column(index, field, names))


def saveable(result: ProfileResult) -> ProfileResult:
    """``result``'s activity and metadata in a result with every table a save needs (fixture_results)."""
    return dataclasses.replace(synthetic_result(), activity=result.activity, metadata=result.metadata)


# -- the page ------------------------------------------------------------------------------------------------
def test_the_page_holds_every_compared_row_with_its_interval_as_compare_computes_it():
    before, after = stepped_pair()
    table = compare(before, after)
    tables = read(ComparisonRenderer().render(before, after))
    for level in ("function", "kernel"):
        expected = table[table["level"] == level]
        rows = page_rows(tables, level)
        assert len(rows) == len(expected) > 0
        got = {cell_key(row.cells, level): row.cells for row in rows}
        offset = 1 if level == "kernel" else 0  # the kernel column
        for want in expected.itertuples():
            cells = got[row_key(want, level)]
            values = [c.key for c in cells[1 + offset :]]
            # before, after, delta, delta % (sorted by the ratio), launches, then the step columns
            assert values[:4] == [str(want.before_us), str(want.after_us), str(want.delta_us), str(want.ratio)]
            assert values[4:6] == [str(want.before_kernels), str(want.after_kernels)]
            steps = (want.step_delta_us, want.step_delta_low_us, want.step_delta_high_us)
            assert values[6:9] == [str(v) for v in steps]
            assert [c.text for c in cells[7 + offset : 10 + offset]] == [us_text(v, signed=True) for v in steps]
            texts = [c.text for c in cells[1 + offset : 5 + offset]]
            percent = f"{100 * (want.ratio - 1):+.1f}%"  # e.g. (160.0 / 80.2 - 1) x 100 for gemm
            assert texts == [us_text(want.before_us), us_text(want.after_us), us_text(want.delta_us, True), percent]
    assert tables.headers["compare-kernel"][-4:] == ["per step Δ (µs)", "95% low (µs)", "95% high (µs)", "noise"]


def test_rows_outside_the_noise_are_marked_and_the_others_are_not():
    before, after = stepped_pair()
    table = compare(before, after)
    tables = read(ComparisonRenderer().render(before, after))
    marks = []
    for level in ("function", "kernel"):
        got = {cell_key(row.cells, level): row for row in page_rows(tables, level)}
        for want in table[table["level"] == level].itertuples():
            row = got[row_key(want, level)]
            outside = bool(want.outside_noise)
            assert row.css == ("outside-noise" if outside else "within-noise")
            assert row.cells[-1].text == ("\u2605 outside" if outside else "within")
            marks.append((level, want.kernel, outside))
    # the synthetic change: gemm doubled (outside), bias unchanged but for the noise (within)
    assert ("kernel", "gemm", True) in marks and ("kernel", "bias", False) in marks


def test_the_page_renders_the_table_it_is_given_and_computes_nothing():
    before, after = stepped_pair()
    table = compare(before, after)
    flipped = table.copy()
    flipped["outside_noise"] = ~flipped["outside_noise"]
    flipped["step_delta_low_us"] = flipped["step_delta_low_us"] - 1000.0
    tables = read(ComparisonRenderer().render(before, after, flipped))
    for level in ("function", "kernel"):
        got = {cell_key(row.cells, level): row for row in page_rows(tables, level)}
        for want in flipped[flipped["level"] == level].itertuples():
            row = got[row_key(want, level)]
            assert row.css == ("outside-noise" if want.outside_noise else "within-noise")
            assert str(want.step_delta_low_us) in [c.key for c in row.cells]
    with pytest.raises(ValueError, match="compare\\(before, after\\)'s DataFrame"):
        ComparisonRenderer().render(before, after, table.drop(columns=["outside_noise"]))
    with pytest.raises(TypeError, match="b is a str"):
        ComparisonRenderer().render(before, "after.parquet")  # type: ignore[arg-type]


def test_one_step_a_side_shows_the_no_noise_estimate_note_and_no_marks():
    stepped, _ = stepped_pair()
    for before, after in ((_result(BEFORE), _result(AFTER)), (stepped, _result(AFTER))):
        table = compare(before, after)
        assert table["step_delta_us"].isna().all()
        page = ComparisonRenderer().render(before, after)
        tables = read(page)
        assert page.count("No noise estimate: a side has one step") == 2  # under each table
        for level in ("function", "kernel"):
            rows = page_rows(tables, level)
            assert len(rows) == int((table["level"] == level).sum()) and {row.css for row in rows} == {""}
            headers = tables.headers[f"compare-{level}"]
            assert "noise" not in headers and "95% low (µs)" not in headers
            assert all("\u2605" not in cell.text for row in rows for cell in row.cells)
        assert f"(before {8 if before is stepped else 1}, after 1)" in page  # each side's step count
    page = ComparisonRenderer().render(*stepped_pair())
    assert "No noise estimate" not in page and "2,000 resamples of the 8 and 8 recorded steps" in page


def test_names_are_escaped():
    before, after = stepped_pair(kernel=EVIL_KERNEL, function=EVIL_FUNCTION)
    page = ComparisonRenderer(labels=("a<1>.parquet", "b&c")).render(before, after)
    assert EVIL_KERNEL not in page and "<script>alert" not in page and EVIL_FUNCTION not in page
    assert f'title="{html.escape(EVIL_KERNEL, quote=True)}"' in page  # the full name on hover
    assert html.escape(EVIL_FUNCTION) in page and "a&lt;1&gt;.parquet" in page and "b&amp;c" in page
    assert page.count("<script") == 2  # the embedded data and the inline script, no other
    tables = read(page)
    kernels = {row.cells[1].titles[0] for row in page_rows(tables, "kernel")}
    assert kernels == {EVIL_KERNEL, "bias"}  # the parser reads the names back as they were
    shown = next(row.cells[1].text for row in page_rows(tables, "kernel") if row.cells[1].titles[0] == EVIL_KERNEL)
    label = kernel_labels([EVIL_KERNEL], list(short_names([EVIL_KERNEL])))[0]
    assert label != EVIL_KERNEL and shown == label + EVIL_KERNEL  # the label, then the full name a click opens
    assert {row.cells[0].text for row in page_rows(tables, "function")} == {EVIL_FUNCTION}


def test_the_page_is_self_contained_like_the_report():
    page = ComparisonRenderer().render(*stepped_pair())
    assert "//" not in "".join(part.split(">")[0] for part in page.split("<")[1:] if part.startswith(("link", "img")))
    for tag in ("<link", "<img", "<iframe", " src="):
        assert tag not in page
    assert 'id="report-data"' in page and "render-ok" in page  # the report's script, which writes it


def test_labels_must_name_two_results():
    with pytest.raises(ValueError, match="labels names the two results"):
        ComparisonRenderer(labels=("only one",))


# -- writing it ----------------------------------------------------------------------------------------------
def test_write_comparison_checks_the_name_and_writes_the_rendered_page(tmp_path):
    before, after = stepped_pair()
    with pytest.raises(ValueError, match="does not end in .html or .htm"):
        write_comparison(before, after, tmp_path / "compare.pdf")
    written = write_comparison(before, after, tmp_path / "sub" / "compare.html", labels=("a", "b"))
    assert written == tmp_path / "sub" / "compare.html"
    assert written.read_text(encoding="utf-8") == ComparisonRenderer(labels=("a", "b")).render(before, after)


def test_a_failed_rewrite_keeps_the_previous_page(tmp_path, monkeypatch):
    before, after = stepped_pair()
    target = write_comparison(before, after, tmp_path / "compare.html")
    previous = target.read_bytes()
    with monkeypatch.context() as patch:
        SmallDisk(patch, tmp_path, len(previous) // 2)
        with pytest.raises(OSError) as info:
            write_comparison(after, before, target)
    assert os.listdir(tmp_path) == ["compare.html"] and target.read_bytes() == previous
    assert str(target) in str(info.value) and "unchanged" in str(info.value)


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def saved(tmp_path) -> tuple[Path, Path]:
    before, after = (saveable(result) for result in stepped_pair())
    return before.save(tmp_path / "a"), after.save(tmp_path / "b.parquet")


def test_cli_compare_writes_the_page_beside_its_other_outputs(saved, tmp_path):
    a, b = saved
    page, csv = tmp_path / "out" / "compare.html", tmp_path / "diff.csv"
    code, stdout, stderr = _run(["compare", str(a), str(b), "--html", str(page), "--csv", str(csv)])
    assert code == 0, stderr
    assert stdout.splitlines()[-2:] == [f"wrote {csv}", f"wrote {page}"]
    table = compare(load(a), load(b))
    expected = ComparisonRenderer(labels=(str(a), str(b))).render(load(a), load(b), table)
    assert page.read_text(encoding="utf-8") == expected and csv.read_text() == table.round(cli.CSV_DIGITS).to_csv(
        index=False
    )
    assert "per step, 95% (us)" in stdout  # the terminal table still shows the interval
    tables = read(expected)
    marked = {row.cells[1].titles[0] for row in page_rows(tables, "kernel") if row.css == "outside-noise"}
    outside = table[(table["level"] == "kernel") & table["outside_noise"].fillna(False).astype(bool)]
    assert marked == set(outside["kernel"]) and marked


def test_cli_compare_checks_the_html_name_before_any_work(saved, tmp_path):
    a, b = saved
    with pytest.raises(SystemExit) as info, redirect_stderr(io.StringIO()) as err:
        cli.main(["compare", str(a), str(b), "--html", str(tmp_path / "x.pdf")])
    assert info.value.code == 2 and "argument --html: the HTML report must end in .html or .htm" in err.getvalue()
    assert not list(tmp_path.glob("x.*"))


def test_pandas_missing_values_render_as_dashes():
    table = compare(_result(BEFORE), _result(AFTER))
    assert pd.isna(table["ratio"]).any()  # gelu and memset are new: no ratio
    rows = page_rows(read(ComparisonRenderer().render(_result(BEFORE), _result(AFTER))), "function")
    gelu = next(row for row in rows if row.cells[0].key == "gelu")
    assert gelu.cells[4].text == "new" and gelu.cells[4].key is None  # sorted last, not as 0
    none = next(row for row in rows if row.cells[0].key == "")
    assert none.cells[0].text == "(no functional call)"


NO_TORCH = """
import sys
sys.modules["torch"] = None  # any `import torch` now raises ImportError
from aitune_dispatch.cli import main
print("code", main(["compare", *sys.argv[1:3], "-q", "--html", sys.argv[3]]))
"""


def test_cli_compare_writes_the_page_without_torch(saved, tmp_path):
    import subprocess
    import sys

    a, b = saved
    page = tmp_path / "compare.html"
    run = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(a), str(b), str(page)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and "code 0" in run.stdout, run.stderr[-2000:]
    assert page.read_text(encoding="utf-8") == ComparisonRenderer(labels=(str(a), str(b))).render(load(a), load(b))
