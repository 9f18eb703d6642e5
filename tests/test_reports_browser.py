"""The HTML report in a real browser: headless Chromium renders it with no script errors.

The page's script writes ``<div id="render-ok">`` once both charts are drawn (its
``data-overflow`` names any section wider than the window), or ``<div id="render-error">`` with
the message; ``--dump-dom`` prints the DOM after load, and ``--enable-logging=stderr`` prints
uncaught errors and console messages. Needs ``/usr/bin/chromium`` (Debian's ``chromium``
package): skips without it, except under CI (``CI=true``), where scripts/test.sh installs it and
a missing browser fails the run.

``python tests/test_reports_browser.py [docs/report.png]`` renders the report of the H200 demo
result committed in tests/data and saves the README's screenshot.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WINDOW = (1400, 1800)
NARROW = (1000, 1800)
CONSOLE_PROBLEM = re.compile(r"Uncaught|:CONSOLE\(\d+\)\]|Refused to|net::ERR_")
SAVED = Path(__file__).parent / "data" / "h200_demo_result"  # fixture_results.H200_RESULT, for main() too
RENDER_OK = re.compile(r'<div id="render-ok" hidden="" data-overflow="([^"]*)"></div>')


@pytest.fixture(autouse=True)
def _chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI") == "true":  # CI installs it (scripts/test.sh): a missing browser is a failure there
        pytest.fail(f"{CHROMIUM} is missing under CI; scripts/test.sh installs Debian's chromium")
    pytest.skip("needs /usr/bin/chromium (apt-get install chromium)")


def run_chromium(page: Path, *extra: str, profile: Path) -> subprocess.CompletedProcess[str]:
    """Chromium on ``page`` with the test flags; its own profile folder, 120 s at most."""
    command = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def dump_dom(page: Path, profile: Path, window: tuple[int, int] = WINDOW) -> tuple[str, str]:
    """``(DOM after load, browser log)`` of ``page`` in a ``window``-sized viewport."""
    size = f"--window-size={window[0]},{window[1]}"
    done = run_chromium(page, "--enable-logging=stderr", "--v=0", size, "--dump-dom", profile=profile)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def screenshot(page: Path, png: Path, profile: Path) -> Path:
    """A ``WINDOW``-sized PNG of ``page``."""
    done = run_chromium(
        page, f"--screenshot={png.resolve()}", f"--window-size={WINDOW[0]},{WINDOW[1]}", profile=profile
    )
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
    return png


def png_size(png: Path) -> tuple[int, int]:
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def console_problems(log: str) -> list[str]:
    return [line for line in log.splitlines() if CONSOLE_PROBLEM.search(line)]


def h200_report(path: Path) -> Path:
    """The report of the demo model's result recorded on the H200 (tests/data), rendered here."""
    import aitune_dispatch
    from aitune_dispatch.reports import write_report

    return write_report(aitune_dispatch.load(SAVED), path)


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory: pytest.TempPathFactory, demo_result) -> Path:
    from aitune_dispatch.reports import write_report

    return write_report(demo_result, tmp_path_factory.mktemp("report") / "report.html")


@pytest.fixture(scope="module")
def h200_page(tmp_path_factory: pytest.TempPathFactory, h200_result) -> Path:
    from aitune_dispatch.reports import write_report

    return write_report(h200_result, tmp_path_factory.mktemp("h200") / "report.html")


def test_report_renders_without_errors(demo_page, tmp_path):
    dom, log = dump_dom(demo_page, tmp_path / "profile")
    assert '<div id="render-error"' not in dom
    assert RENDER_OK.search(dom), dom[-500:]
    assert dom.count("<rect") > 20  # bars and icicle boxes were drawn
    assert "kernel time (ms)" in dom or "kernel time (µs)" in dom or "kernel time (s)" in dom  # the axis label
    assert console_problems(log) == []


WIDTHS = [WINDOW, (1101, 1800), NARROW, (900, 1800), (800, 1800)]  # 1101: the narrowest side-by-side panels


@pytest.mark.parametrize("window", WIDTHS, ids=[f"{w}px" for w, _ in WIDTHS])
def test_h200_report_tables_fit_the_window(h200_page, tmp_path, window):
    dom, log = dump_dom(h200_page, tmp_path / "profile", window)
    ok = RENDER_OK.search(dom)
    assert ok is not None and console_problems(log) == [], (dom[-500:], console_problems(log))
    assert ok.group(1) == ""  # no section wider than the window: nothing clipped, no sideways scrolling
    for table in ("summary", "kernels", "modules", "coverage"):
        assert f'<table class="{table}">' in dom
    assert dom.count('<table class="kernels">') == 1 and "fmha_cutlassF_f32_aligned_64x64_rf_sm80" in dom
    assert "kernel time (µs)" in dom  # the chart's unit, the same as the tables'
    icicle = dom[dom.index('id="icicle"') :]
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", icicle[: icicle.index("</svg>")])
    # local names label the icicle's boxes (blocks.0.qkv is "qkv" under "0" under "blocks"), never full paths
    assert {"blocks  197 µs", "0  98.3 µs", "1  98.2 µs"} <= set(labels), labels  # wide boxes, at any width
    if window[0] >= 1000:
        assert {"qkv", "proj", "linear"} <= set(labels), labels  # narrow ones, where they fit
    assert not [label for label in labels if "." in label.split()[0]], labels


RESIZE_PROBE = """<!doctype html><html><body style="margin:0">
<iframe id="report" style="width:1400px;height:1200px;border:0"></iframe><div id="probe"></div>
<script>
var frame = document.getElementById("report");
function state() {  // chart widths and whether the chart and summary panels sit side by side
  var doc = frame.contentDocument, bars = doc.querySelector("#bar-chart svg"), tree = doc.querySelector("#icicle svg");
  var chart = doc.getElementById("functions").getBoundingClientRect();
  var summary = doc.getElementById("summary").getBoundingClientRect();
  return {bars: +bars.getAttribute("width"), tree: +tree.getAttribute("width"),
          side_by_side: summary.left > chart.right - 1,
          overflow: doc.getElementById("render-ok").getAttribute("data-overflow")};
}
frame.onload = function () {
  var wide = state();
  frame.style.width = "900px";  // the report's window shrinks: it must stack its panels and redraw its charts
  // the browser fires "resize" at its next rendering step, which headless virtual time may skip: fire it
  // as the browser would, once the new width is laid out (the report's handler reads innerWidth)
  if (frame.contentWindow.innerWidth === 900) { frame.contentWindow.dispatchEvent(new Event("resize")); }
  var polls = 0;
  (function poll() {  // until the charts were redrawn (the report debounces resizes by 120 ms), 8 s at most
    var now = state();
    if (now.bars !== wide.bars || ++polls > 80) {
      document.getElementById("probe").textContent = JSON.stringify({wide: wide, narrow: now});
    } else {
      setTimeout(poll, 100);
    }
  })();
};
frame.srcdoc = REPORT;
</script></body></html>"""


def test_h200_report_stacks_below_1100_px_and_redraws_on_resize(h200_page, tmp_path):
    import html
    import json

    probe = tmp_path / "probe.html"
    page = h200_page.read_text(encoding="utf-8")
    probe.write_text(RESIZE_PROBE.replace("REPORT", json.dumps(page).replace("</", "<\\/")), encoding="utf-8")
    size = f"--window-size={WINDOW[0]},{WINDOW[1]}"
    done = run_chromium(probe, "--enable-logging=stderr", "--v=0", size, "--virtual-time-budget=20000", "--dump-dom",
                        profile=tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<div id="probe">(.*?)</div>', done.stdout, re.S)
    assert found and found.group(1), (done.stdout[-800:], console_problems(done.stderr))
    seen = json.loads(html.unescape(found.group(1)))
    wide, narrow = seen["wide"], seen["narrow"]
    assert wide["side_by_side"] and not narrow["side_by_side"], seen  # the two panels stack below 1,100 px
    assert narrow["bars"] > wide["bars"] and narrow["tree"] < wide["tree"], seen  # both charts redrawn at the new width
    assert wide["overflow"] == narrow["overflow"] == "", seen  # nothing clipped before or after
    assert console_problems(done.stderr) == []


SORT_PROBE = """<script>
(function () {  // after the report's script: click a numeric header twice, read the column, measure overflow
  function column(table, index) {
    return Array.prototype.map.call(table.tBodies[0].rows, function (row) {
      return parseFloat(row.cells[index].getAttribute("data-sort"));
    });
  }
  var table = document.querySelector("table.kernel-rollup"), heads = table.tHead.rows[0].cells, index = -1;
  for (var i = 0; i < heads.length; i++) { if (heads[i].textContent.indexOf("mean") === 0) { index = i; } }
  var out = {before: column(table, index), buttons: table.querySelectorAll("th button.sort").length};
  heads[index].querySelector("button").click();
  out.ascending = column(table, index);
  out.aria_first = heads[index].getAttribute("aria-sort");
  heads[index].querySelector("button").click();
  out.descending = column(table, index);
  out.aria_second = heads[index].getAttribute("aria-sort");
  out.overflow = Array.prototype.filter.call(document.querySelectorAll("section"), function (section) {
    return section.scrollWidth > section.clientWidth + 1;
  }).map(function (section) { return section.id; });
  var probe = document.createElement("div");
  probe.id = "probe";
  probe.textContent = JSON.stringify(out);
  document.body.appendChild(probe);
})();
</script>"""


def rows_of(dom: str, css: str) -> list[str]:
    """The body rows' HTML of ``<table class="css">`` in a dumped DOM."""
    body = re.search(rf'<table class="{css}">.*?<tbody>(.*?)</tbody>', dom, re.S)
    assert body is not None, f"no {css} table"
    return re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)


@pytest.mark.parametrize("window", [WINDOW, (900, 1800)], ids=["1400px", "900px"])
def test_h200_report_shows_rollup_and_gpu_busy_and_sorts(h200_page, h200_result, tmp_path, window):
    import html
    import json

    from aitune_dispatch.reports.html import percent
    from aitune_dispatch.results import views

    page = tmp_path / "sorting.html"
    page.write_text(h200_page.read_text(encoding="utf-8").replace("</body>", SORT_PROBE + "</body>"), encoding="utf-8")
    dom, log = dump_dom(page, tmp_path / "profile", window)
    ok = RENDER_OK.search(dom)
    assert ok is not None and ok.group(1) == "" and console_problems(log) == [], (dom[-500:], console_problems(log))
    # the roll-up's first row is the kernel with the largest total over all its launches
    rollup = views.kernel_rollup(h200_result)
    title = re.search(r'<code title="([^"]*)"', rows_of(dom, "kernel-rollup")[0])
    assert title is not None and html.unescape(title.group(1)) == rollup["kernel"][0]
    # the busy share shown (the headline card) is device_busy's, as the page formats it
    busy = views.device_busy(h200_result)
    share = percent(busy[busy["stream"].isna()]["busy_share"].iloc[0])
    card = re.search(r'<div class="card" id="card-gpu-busy">.*?<div class="value">([^<]*)</div>', dom, re.S)
    assert card is not None and card.group(1) == share
    assert len(rows_of(dom, "device-busy")) == len(busy)
    assert len(rows_of(dom, "idle-gaps")) > 0  # the longest idle gaps, with the modules the host ran
    # clicking a numeric header sorts by the raw values, then reverses
    found = re.search(r'<div id="probe">(.*?)</div>', dom, re.S)
    assert found is not None, dom[-800:]
    seen = json.loads(html.unescape(found.group(1)))
    assert seen["buttons"] == 8  # every header of the roll-up sorts
    assert sorted(seen["before"]) == seen["ascending"] != seen["before"]
    assert seen["descending"] == sorted(seen["before"], reverse=True)
    assert (seen["aria_first"], seen["aria_second"]) == ("ascending", "descending")
    assert seen["overflow"] == []  # sorted tables still fit the window


def test_report_screenshot(demo_page, tmp_path):
    png = screenshot(demo_page, tmp_path / "report.png", tmp_path / "profile")
    assert png_size(png) == WINDOW
    assert png.stat().st_size > 20_000  # a drawn page, not a blank one


def test_error_detection_is_not_vacuous(demo_page, tmp_path):
    page = demo_page.read_text(encoding="utf-8")
    broken = re.sub(r'(id="report-data">).*?(</script>)', r"\1{}\2", page, count=1, flags=re.S)
    broken = broken.replace("</body>", '<script>throw new Error("boom");</script></body>')
    target = tmp_path / "broken.html"
    target.write_text(broken, encoding="utf-8")
    dom, log = dump_dom(target, tmp_path / "profile")
    assert '<div id="render-error">report script error:' in dom and '<div id="render-ok"' not in dom
    assert any("Uncaught Error: boom" in line for line in console_problems(log))


def test_hostile_names_stay_text_in_the_browser(tmp_path):
    from fixture_results import synthetic_result

    from aitune_dispatch.reports import write_report

    hostile = 'fc<img id="injected" src=x onerror="document.title=1">'
    page = write_report(synthetic_result(fc_name=hostile), tmp_path / "hostile.html")
    dom, log = dump_dom(page, tmp_path / "profile")
    assert '<div id="render-ok"' in dom and console_problems(log) == []
    assert not re.search(r'<img[^>]*id="injected"', dom)  # never an element: only ever text
    assert 'id="injected"' in dom  # ... which is there, as text
    assert "fc&lt;img" in dom  # shown, as text, in the icicle


def main(argv: list[str]) -> int:
    """Render the H200 demo result's report and save its screenshot (default ``docs/report.png``)."""
    if not CHROMIUM.exists():
        print(f"needs {CHROMIUM}: apt-get install -y chromium", file=sys.stderr)
        return 1
    target = Path(argv[0] if argv else "docs/report.png")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        page = h200_report(Path(scratch) / "report.html")
        dom, log = dump_dom(page, Path(scratch) / "profile")
        if '<div id="render-ok"' not in dom or console_problems(log):
            print("the report did not render cleanly:", *console_problems(log), sep="\n", file=sys.stderr)
            return 1
        screenshot(page, target, Path(scratch) / "profile")
    print(target)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, not an installed one
    sys.exit(main(sys.argv[1:]))


COMPARE_WIDTHS = [WINDOW, NARROW, (800, 1800)]  # the report's tables fit 800 px and up, so do these


@pytest.mark.parametrize("window", COMPARE_WIDTHS, ids=[f"{w}px" for w, _ in COMPARE_WIDTHS])
def test_the_comparison_page_renders_and_fits_the_window(h200_result, tmp_path, window):
    """The H200 result against itself (long kernel names, no noise estimate) and a stepped pair (the marks)."""
    import numpy as np
    from test_compare import _stepped

    from aitune_dispatch.reports import write_comparison

    rng = np.random.default_rng(1)
    noisy = [_stepped([{"gemm": mean + rng.normal(0, 1), "bias": 5.0} for _ in range(8)]) for mean in (10, 20)]
    for name, (before, after) in {"h200": (h200_result, h200_result), "steps": noisy}.items():
        page = write_comparison(before, after, tmp_path / f"{name}.html")
        dom, log = dump_dom(page, tmp_path / f"profile-{name}", window)
        ok = RENDER_OK.search(dom)
        assert ok is not None and console_problems(log) == [], (name, dom[-500:], console_problems(log))
        assert ok.group(1) == "", (name, ok.group(1))  # no section wider than the window
        assert '<button type="button" class="sort"' in dom  # the report's script made its tables sortable
        assert ('<tr class="outside-noise">' in dom) == (name == "steps")
        assert ("No noise estimate" in dom) == (name == "h200")
