"""The README and the pages of docs/ say what the code does: each page is checked against it.

README.md is a quick start (short, no measured figure, its summary the one the saved H200 run
gives); every relative link resolves; the column lists the pages give are the schema's; every
Python block type-checks against the package; docs/benchmarks.md's script runs; docs/cli.md's
session is what the CLI prints (tests/test_cli.py) and its synopsis names only real options.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

import aitune_dispatch
from aitune_dispatch import schema
from aitune_dispatch.cli import build_parser
from aitune_dispatch.results.views import BUSY_COLUMNS, GAP_COLUMNS, ROLLUP_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = {name: ROOT / "docs" / f"{name}.md" for name in ("api", "cli", "compiled", "benchmarks", "design")}
H200 = ROOT / "tests" / "data" / "h200_demo_result"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# a number with a unit of time, size or ratio, or a percentage: what a measurement reads
FIGURE = re.compile(r"\d(?:[\d,.]*\d)?\s?(?:×|%|ms\b|µs\b|ns\b|GB\b|MB\b|GiB\b|s\b)")


def _prose(text: str) -> str:
    return FENCE.sub("", text)


def _blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def test_the_readme_is_a_quick_start():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    commands = _blocks(text, "bash")[0]
    assert "bash scripts/demo.sh" in commands and "bash scripts/test.sh" in commands
    assert "exec bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()  # CI runs the README's command
    figures = FIGURE.findall(_prose(text))
    assert not figures, f"measured figures belong in benchmarks/RESULTS.md: {figures}"
    for page in PAGES.values():
        assert f"]({page.relative_to(ROOT)})" in text, page  # every docs page is linked from it


@pytest.mark.parametrize("page", ["api", "cli", "compiled", "benchmarks"])
def test_reference_pages_hold_no_measured_figure(page):
    prose = _prose(PAGES[page].read_text(encoding="utf-8"))
    prose = re.sub(r"`[^`]*`", "", prose)  # code names such as `IQR > 25%` thresholds are settings, not figures
    assert not FIGURE.findall(prose), FIGURE.findall(prose)


def test_the_readme_summary_is_the_saved_runs_describe():
    text = README.read_text(encoding="utf-8")
    shown = next(b for b in _blocks(text, "") if "function_name  calls" in b)
    with pd.option_context("display.width", 250, "display.max_columns", None):
        printed = str(aitune_dispatch.load(H200).describe())
    assert shown.rstrip("\n").splitlines() == printed.splitlines()


def _slug(heading: str) -> str:
    heading = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


@pytest.mark.parametrize("path", [README, *PAGES.values()], ids=lambda p: p.name)
def test_every_relative_link_resolves(path):
    text = _prose(path.read_text(encoding="utf-8"))
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links or path.stem == "design"  # the design page cites by section, not by link
    for link in links:
        if re.match(r"\w+://", link):
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.exists(), f"{path.name}: {link} names no file"
        if anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{path.name}: {link} names no heading"


def _row(page: str, first_cell: str) -> str:
    return next(line for line in PAGES[page].read_text(encoding="utf-8").splitlines() if line.startswith(first_cell))


def _backticked_list(cell: str) -> list[str]:
    listed = re.search(r"`([a-z_]+(?:, [a-z_]+){2,})`", cell)
    assert listed, cell
    return listed.group(1).split(", ")


def test_the_api_pages_column_lists_are_the_schemas():
    assert _backticked_list(_row("api", "| `activity` |")) == schema.ACTIVITY.names
    assert _backticked_list(_row("api", "| `launches` |")) == schema.LAUNCHES.names
    assert _backticked_list(_row("api", "| `kernel_sources` |")) == schema.KERNEL_SOURCES.names
    assert _backticked_list(_row("api", "| `samples()` |")) == schema.SAMPLE_COLUMNS
    cited = {"kernel_rollup": "ROLLUP_COLUMNS", "device_busy": "BUSY_COLUMNS", "idle_gaps": "GAP_COLUMNS"}
    for view, columns in cited.items():
        assert columns in _row("api", f"| `{view}(")
    assert ROLLUP_COLUMNS and BUSY_COLUMNS and GAP_COLUMNS  # the names the page cites exist
    for attribution in schema.ATTRIBUTIONS:  # the values `attribution` can take are each explained
        assert f"`{attribution}`" in PAGES["api"].read_text(encoding="utf-8")


def test_the_benchmarks_page_explains_every_column():
    text = PAGES["benchmarks"].read_text(encoding="utf-8")
    table = [line for line in text.splitlines() if line.startswith("| `")]
    explained = [name for line in table for name in re.findall(r"`(\w+)`", line.split("|")[1])]
    assert sorted(explained) == sorted(schema.BENCHMARK_COLUMNS)


def test_the_compiled_page_names_real_metadata_and_attributions():
    text = PAGES["compiled"].read_text(encoding="utf-8")
    keys = set(re.findall(r"`(\w+)`", text))
    metadata = (schema.META_INDUCTOR, schema.META_GRAPH_CAPTURE, schema.META_COMPILED_KERNELS)
    metadata += (schema.META_GRAPH_KERNELS,)
    for key in metadata:
        assert key in keys
    for attribution in schema.ATTRIBUTIONS:
        assert attribution in keys
    assert re.search(r'metadata\["(\w+)"\]', text).group(1) == schema.META_TRACER


def test_the_cli_pages_synopsis_names_only_real_options():
    text = PAGES["cli"].read_text(encoding="utf-8")
    synopsis = [line for line in _blocks(text, "")[0].splitlines() if line.startswith("aitune-dispatch ")]
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {line.split()[1] for line in synopsis} == set(commands)
    for line in synopsis:
        name = line.split()[1]
        known = {s for action in commands[name]._actions for s in action.option_strings}
        for flag in re.findall(r"--[\w-]+", line):
            assert flag in known, f"{name} has no {flag}"


MYPY_CONFIG = """
[mypy]
follow_imports = silent
ignore_missing_imports = True
# the spec's example (quoted unchanged) builds samples with an empty {} literal, which mypy wants
# annotated: the user's code, not our API's types
disable_error_code = var-annotated
[mypy-torch.*]
follow_imports = skip
"""


def test_mypy_accepts_every_python_block(tmp_path):
    """Each page's blocks, after the README's (which define the model, samples and profiler they use)."""
    pytest.importorskip("mypy")
    readme = _blocks(README.read_text(encoding="utf-8"), "python")
    assert len(readme) >= 2
    files = []
    for name, page in PAGES.items():
        blocks = _blocks(page.read_text(encoding="utf-8"), "python")
        snippet = tmp_path / f"{name}_snippets.py"
        snippet.write_text("\n".join(textwrap.dedent(b) for b in readme + blocks))
        files.append(snippet.name)
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG)
    command = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-incremental"]
    env = {"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([*command, *files], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    # and the check is not vacuous: the old shadowing (a submodule named like the function) fails it
    (tmp_path / "bad.py").write_text("import aitune_dispatch.results.persist as p\np.save_result(1)\np()\n")
    bad = subprocess.run([*command, "bad.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "Module not callable" in bad.stdout


def test_the_benchmarks_page_script_runs(tmp_path):
    script = _blocks(PAGES["benchmarks"].read_text(encoding="utf-8"), "python")[0]
    (tmp_path / "example.py").write_text(script)
    run = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for column in ("recorded_us_per_call", "us_per_call", "speedup", "weighted_us", "reason"):
        assert column in out  # the table, the weighted totals and activation.skipped were printed
    assert "tanh: output differs from the original" in out  # the page's reading of the tanh rows
    routed = re.search(r"^\{'linear': (\d+)\}$|^\{\}$", out, re.M)
    assert routed, out[-2000:]  # activation.routed: the calls sent to flat_linear (none where it was never faster)
