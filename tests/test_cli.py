"""The command line: demo, profile with a user factory, report, compare, progress and bad input."""

from __future__ import annotations

import contextlib
import csv as csv_module
import io
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pandas as pd
import pytest
import torch
from fixture_results import H200_RESULT

from aitune_dispatch import cli
from aitune_dispatch.cli import main
from aitune_dispatch.results import ProfileResult, compare, load

SUMMARY_HEADER = ["function", "calls", "samples", "modules", "time", "share", "tensors (MB)"]


def header(line: str) -> list[str]:
    """A table title line's column titles, with ``time (<unit>)`` read as ``time``."""
    return [re.sub(r"^time \((µs|ms|s)\)$", "time", t) for t in re.split(r"\s{2,}", line.strip())]


def table_rows(lines: list[str]) -> dict[str, list[str]]:
    """The rows under the first ``-----`` rule, by first cell, until the coverage line."""
    start = next(i for i, line in enumerate(lines) if line.startswith("-----")) + 1
    rows = {}
    for line in lines[start:]:
        if line.startswith("coverage"):
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells
    return rows


MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn

    CALLS = []
    NOT_CALLABLE = 3


    def build(device):  # no default: fails unless the CLI passes device=
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU()).to(device)
        return model, [((torch.randn(2, 8, device=device),), {}), ((torch.randn(3, 8, device=device),), {})]


    def build_wide():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 16)), [((torch.randn(2, 8),), {})]


    def build_function():
        model = nn.Sequential(nn.Linear(8, 4))

        def pipeline(x):
            CALLS.append(x.shape[0])
            return model(x) * 2

        return pipeline, [((torch.randn(5, 8),), {})], model


    def raises():
        raise RuntimeError("no weights here\\nsecond line")


    def wrong_type():
        return 42


    def wrong_length():
        return (nn.Linear(2, 2),)


    def not_a_module():
        return (lambda x: x), [((1,), {})]


    def bad_samples():
        return nn.Linear(2, 2), [torch.randn(2)]


    def forward_fails():
        return nn.Linear(2, 2), [((torch.randn(3, 5),), {})]
    """
)


@pytest.fixture
def models(tmp_path, monkeypatch) -> Path:
    """``cli_models.py`` (and a ``cli_broken.py`` that fails on import), importable by name."""
    path = tmp_path / "cli_models.py"
    path.write_text(MODELS)
    (tmp_path / "cli_broken.py").write_text("1 / 0\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    for name in ("cli_models", "cli_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return path


def _fake_reports() -> tuple[types.SimpleNamespace, list]:
    """A stand-in for ``reports.renderer_for``: each renderer records what it wrote and writes its kind."""
    calls: list = []

    class Writer:
        def __init__(self, kind: str) -> None:
            self.kind = kind

        def write(self, result: ProfileResult, path: Path) -> Path:
            calls.append((self.kind, result, Path(path)))
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(self.kind)
            return Path(path)

    def renderer_for(path: Path) -> Writer:
        return Writer("html" if Path(path).suffix == ".html" else "perfetto")

    return types.SimpleNamespace(renderer_for=renderer_for), calls


@pytest.fixture
def fake_reports(monkeypatch) -> list:
    module, calls = _fake_reports()
    monkeypatch.setattr(cli, "renderer_for", module.renderer_for)
    return calls


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


# -- demo --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[int, str, str, Path, list]:
    out = tmp_path_factory.mktemp("demo")
    module, calls = _fake_reports()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "renderer_for", module.renderer_for)
        code, stdout, stderr = _run(["demo", "--device", "cpu", "--warmup", "1", "--out", str(out)])
    return code, stdout, stderr, out, calls


def test_demo_prints_the_summary_table(demo):
    code, stdout, _, _, _ = demo
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0] == "aitune_dispatch demo on cpu (cpu activity source; shares of all kernel time)"
    assert header(lines[1]) == SUMMARY_HEADER
    rows = table_rows(lines)
    assert {"linear", "conv2d", "layer_norm", "scaled_dot_product_attention", "gelu", "softmax"} <= set(rows)
    assert all(re.fullmatch(r"\d+\.\d%", row[5]) for row in rows.values())  # shares, one decimal
    assert any(re.match(r"coverage \d+\.\d%: .* (µs|ms|s) of .* kernel time attributed", line) for line in lines)
    # no unformatted floats: four or more decimals only where small times keep two significant digits
    # (9 µs in a ms column reads 0.0090)
    assert not any(re.search(r"\d\.(?!0+[1-9]\d?\b)\d{4,}", line) for line in lines)


def test_demo_shows_progress_on_stderr(demo):
    _, stdout, stderr, _, _ = demo
    lines = stderr.splitlines()
    assert lines[:3] == [  # stderr is no terminal here: a line per stage, no bar
        "aitune-dispatch: warmup: 1 passes of 2 calls",
        "aitune-dispatch: recording one pass of 2 calls on cpu",
        "aitune-dispatch: post-processing: joining kernels to ops, functional calls and modules",
    ]
    assert lines[3].startswith("aitune-dispatch: post-processing done: ") and len(lines) == 4
    assert "\r" not in stderr and "\x1b" not in stderr and "1/1" not in stderr
    assert "warmup" not in stdout  # progress never mixes into the table


def test_demo_out_saves_the_result_and_writes_the_reports(demo):
    _, stdout, _, out, calls = demo
    result = load(out / "result")
    assert result.source == "cpu" and result.attributed().num_rows > 0
    assert [(kind, path) for kind, _, path in calls] == [
        ("html", out / "report.html"),
        ("perfetto", out / "trace.json"),
    ]
    assert all(written is calls[0][1] for _, written, _ in calls)  # both renderers get the recorded result
    assert result.activity.equals(calls[0][1].activity)
    assert f"saved the result to {out / 'result'}" in stdout and f"wrote {out / 'report.html'}" in stdout


# -- profile -----------------------------------------------------------------------------------------
def test_profile_a_factory_from_a_file(models, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # room for the temporary path in the title line (else it wraps)
    argv = ["profile", f"{models}:build", "--device", "cpu", "--warmup", "2", "--function-names", "linear"]
    code, stdout, stderr = _run(argv)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == f"{models}:build on cpu (cpu activity source; shares of all kernel time)"
    rows = table_rows(lines)
    assert set(rows) == {"linear", "relu"}
    assert rows["linear"][1:3] == ["2", "2"]  # 2 calls, 2 distinct samples (batch 2, 3)
    assert rows["relu"][1:3] == ["-", "-"]  # --function-names: no samples kept for relu
    assert "aitune-dispatch: warmup: 2 passes of 2 calls" in stderr.splitlines()


def test_profile_a_function_with_its_module(models, tmp_path):
    out = tmp_path / "out"
    code, stdout, stderr = _run(
        [
            "profile",
            "cli_models:build_function",
            "--device",
            "cpu",
            "--warmup",
            "2",
            "--out",
            str(out),
            "--with-tensors",
            "--quiet",
        ]
    )
    assert code == 0, stderr
    assert sys.modules["cli_models"].CALLS == [5, 5, 5]  # 2 warm-up passes + the recorded one
    result = load(out / "result", with_tensors=True)
    assert result.modules["module_name"].to_pylist() == ["", "0"]
    assert torch.is_tensor(result.function_data["linear"][0][1][0][0])


def test_quiet_silences_progress(models):
    argv = ["profile", "cli_models:build_wide", "--device", "cpu", "--warmup", "1"]
    loud, quiet = _run(argv), _run([*argv, "--quiet"])
    assert loud[0] == quiet[0] == 0
    assert "warmup: 1 passes" in loud[2] and quiet[2] == ""
    assert header(quiet[1].splitlines()[1]) == SUMMARY_HEADER  # the table is still printed


def test_progress_draws_no_bar_where_stderr_is_no_terminal(capsys):
    progress = cli.Progress(quiet=False)  # pytest's captured stderr is no terminal
    assert not progress.draws_bars
    with progress:
        progress.stage("warmup: 3 passes of 2 calls")
        for done in range(4):
            progress.step("warm-up passes", done, 3)
    assert capsys.readouterr().err == "aitune-dispatch: warmup: 3 passes of 2 calls\n"  # the stage, no count


def test_progress_draws_a_bar_with_a_count_on_a_terminal():
    stream = io.StringIO()
    with cli.Progress(quiet=False, stream=stream, tty=True) as progress:
        progress.stage("recording one pass of 3 calls on cpu")
        for done in range(4):
            progress.step("recorded samples", done, 3)
    drawn = stream.getvalue()
    assert "aitune-dispatch: recording one pass of 3 calls on cpu" in drawn
    assert "recorded samples" in drawn and "3/3" in drawn and "ETA" in drawn
    quiet = io.StringIO()
    with cli.Progress(quiet=True, stream=quiet, tty=True) as progress:
        progress.stage("warmup")
        progress.step("warm-up passes", 1, 3)
    assert quiet.getvalue() == ""  # --quiet: silent, terminal or not


PTY_PROGRESS = textwrap.dedent(
    """
    import sys, time
    from aitune_dispatch.progress import Progress
    with Progress(quiet=False) as progress:
        progress.stage("warmup: 4 passes of 1 calls")
        for done in range(5):
            progress.step("warm-up passes", done, 4)
            time.sleep(0.05)
    print("rich" in sys.modules, file=sys.stdout)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_progress_on_a_real_terminal_shows_the_count():
    import pty

    leader, follower = pty.openpty()
    run = subprocess.run(
        [sys.executable, "-c", PTY_PROGRESS], stderr=follower, stdout=subprocess.PIPE, text=True, timeout=120
    )
    os.close(follower)
    drawn = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(leader, 65536):
            drawn += chunk
    os.close(leader)
    assert run.returncode == 0 and run.stdout.strip() == "True"  # rich is imported for the bar only
    text = drawn.decode("utf-8", "replace")
    assert "warmup: 4 passes of 1 calls" in text and "warm-up passes" in text and "/4" in text


def test_progress_without_a_terminal_imports_no_rich():
    script = PTY_PROGRESS.replace("Progress(quiet=False)", "Progress(quiet=False, tty=False)")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "False" and run.stderr.count("\n") == 1


# -- bad input ---------------------------------------------------------------------------------------
BAD_INPUT = [
    (["report", "{tmp}/missing"], "no saved result at"),
    (["report", "{tmp}/cli_models.py"], "is not a Parquet file"),
    (["compare", "{tmp}/missing_a", "{tmp}/missing_b"], "no saved result at"),
    (["profile", "no_colon_here"], "expected MODULE:FACTORY"),
    (["profile", "cli_models:"], "expected MODULE:FACTORY"),
    (["profile", "cli_models:bad-name"], "expected MODULE:FACTORY"),
    (["profile", "cli_missing_module:build"], "cannot find module 'cli_missing_module'"),
    (["profile", "{tmp}/nope.py:build"], "no such file"),
    (["profile", "cli_broken:build"], "importing cli_broken raised ZeroDivisionError"),
    (["profile", "cli_models:nope"], "has no attribute 'nope'"),
    (["profile", "cli_models:NOT_CALLABLE"], "not a callable factory"),
    (["profile", "cli_models:raises"], "raised RuntimeError: no weights here"),
    (["profile", "cli_models:wrong_type"], "must return (model, samples) or (function, samples, module); got a int"),
    (["profile", "cli_models:wrong_length"], "got a 1-tuple"),
    (["profile", "cli_models:not_a_module"], "with an nn.Module; got a function"),
    (["profile", "cli_models:bad_samples"], "returned bad samples: data[0] must be an (args, kwargs) pair"),
    (["profile", "cli_models:forward_fails"], "the workload raised RuntimeError"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_exits_with_one_line(models, argv, message):
    argv = [arg.format(tmp=models.parent) for arg in argv]
    if argv[0] == "profile":
        argv += ["--device", "cpu", "--warmup", "1", "--quiet"]
    code, stdout, stderr = _run(argv)
    assert code == 1
    assert stderr.count("\n") == 1 and stderr.startswith("aitune-dispatch: error: "), stderr
    assert message in stderr and "second line" not in stderr and "Traceback" not in stderr


def test_cuda_without_cuda_is_one_line(models, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, stderr = _run(["demo", "--device", "cuda"])
    assert code == 1 and stderr == (
        "aitune-dispatch: error: --device cuda was requested but CUDA is unavailable; use --device cpu or auto\n"
    )


def test_bad_input_in_a_real_process_has_no_traceback(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "aitune_dispatch", "report", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith("aitune-dispatch: error: no saved result at") and run.stderr.count("\n") == 1


# -- report and compare --------------------------------------------------------------------------------
@pytest.fixture
def two_saved(models, tmp_path) -> tuple[Path, Path]:
    """A directory result saved by the CLI and a single-file result saved by the API."""
    from aitune_dispatch.profiler import ModuleFunctionKernelProfiler

    a, b = tmp_path / "a", tmp_path / "b.parquet"
    assert _run(["profile", "cli_models:build", "--device", "cpu", "--warmup", "0", "--out", str(a), "-q"])[0] == 0
    model, samples = sys.modules["cli_models"].build_wide()
    ModuleFunctionKernelProfiler(device="cpu").profile_result(model, samples, warmup_iterations=0).save(b)
    return a / "result", b


def test_report_prints_the_summary_and_writes_reports(two_saved, fake_reports, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # room for the whole temporary path in the title line
    saved, _ = two_saved
    code, stdout, _ = _run(["report", str(saved), "--top", "1", "--out", str(tmp_path / "r")])
    assert code == 0
    lines = stdout.splitlines()
    expected = load(saved).describe(1)
    assert lines[0] == f"{saved} (cpu activity source; shares of all kernel time)"
    assert header(lines[1]) == SUMMARY_HEADER
    assert list(table_rows(lines)) == [expected["function_name"][0]]  # --top-k 1
    assert lines[-2:] == [f"wrote {tmp_path / 'r' / 'report.html'}", f"wrote {tmp_path / 'r' / 'trace.json'}"]
    assert [(kind, path.name) for kind, _, path in fake_reports] == [
        ("html", "report.html"),
        ("perfetto", "trace.json"),
    ]
    code, _, _ = _run(["report", str(saved), "--html", str(tmp_path / "only.html")])
    assert code == 0 and fake_reports[-1][0] == "html" and (tmp_path / "only.html").read_text() == "html"


def test_report_with_the_real_renderers(two_saved, tmp_path):
    pytest.importorskip("aitune_dispatch.reports")
    code, _, stderr = _run(["report", str(two_saved[0]), "--out", str(tmp_path / "r")])
    assert code == 0, stderr
    assert (tmp_path / "r" / "report.html").stat().st_size > 0 and (tmp_path / "r" / "trace.json").stat().st_size > 0


def test_compare_prints_both_levels_and_writes_csv(two_saved, tmp_path):
    a, b = two_saved
    csv = tmp_path / "diff.csv"
    code, stdout, _ = _run(["compare", str(a), str(b), "--top", "3", "--csv", str(csv)])
    assert code == 0
    table = compare(load(a), load(b))
    assert csv.read_text() == table.round(cli.CSV_DIGITS).to_csv(index=False)
    for row in csv_module.DictReader(io.StringIO(csv.read_text())):  # no float noise: ns resolution at most
        assert all(len(row[c].partition(".")[2]) <= 3 for c in ("before_us", "after_us", "delta_us")), row
    assert "per function, largest change first" in stdout and "per kernel, largest change first" in stdout
    top_function = table[table["level"] == "function"]["function_name"].iloc[0]
    assert top_function in stdout and "gelu" in set(table["function_name"])


NO_TORCH = textwrap.dedent(
    """
    import sys
    sys.modules["torch"] = None  # any `import torch` now raises ImportError
    from aitune_dispatch.cli import main
    codes = [main(["report", sys.argv[1], "-q", "--out", sys.argv[3]]), main(["compare", *sys.argv[1:3], "-q"])]
    print("codes", codes, sorted(m for m in sys.modules if m.startswith("torch.")))
    """
)


def test_report_and_compare_run_without_torch(two_saved, tmp_path):
    a, b = two_saved
    argv = [sys.executable, "-c", NO_TORCH, str(a), str(b), str(tmp_path / "r")]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "r" / "report.html").is_file() and (tmp_path / "r" / "trace.json").is_file()
    assert run.stdout.splitlines()[-1] == "codes [0, 0] []"
    assert "per kernel" in run.stdout and load(a).describe()["function_name"][0] in run.stdout


def test_help_lists_every_subcommand():
    with pytest.raises(SystemExit) as info, contextlib.redirect_stdout(io.StringIO()) as out:
        main(["--help"])
    assert info.value.code == 0
    assert all(name in out.getvalue() for name in ("demo", "profile", "report", "compare"))


# -- readable output, help, early checks -----------------------------------------------------------------
H200 = H200_RESULT


def test_tables_fit_the_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(H200.parent)  # a short path in the title line
    code, stdout, _ = _run(["report", H200.name, "-q"])
    assert code == 0
    lines = stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert re.search(r"^scaled_dot_product_a\w*… ", stdout, re.M)  # the function column is cut to make room
    # 233.6 µs of kernel time in all, in human units rather than "233.6 us" / "3503149.3 us"
    flat = " ".join(stdout.split())
    assert "coverage 92.3%: 215.6 µs of 233.6 µs kernel time attributed (72 of 82 activity rows)" in flat
    assert 'hint: profile with functions="all"' in stdout  # what to do about the unattributed adds


def test_compare_shows_percent_change_and_warns_on_mixed_sources(two_saved, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    cpu_dir, _ = two_saved
    long_dir = cpu_dir.parent / ("deeply_nested_results_folder_" * 3) / "run"
    shutil.copytree(H200, long_dir)
    code, stdout, stderr = _run(["compare", str(long_dir), str(cpu_dir), "--top", "3"])
    assert code == 0
    assert stderr.splitlines() == [
        "aitune-dispatch: warning: comparing cupti/native on NVIDIA H200 with cpu: kernel names and times differ by "
        "nature (CUDA kernels vs cpu:: ops), so the difference is not a like-for-like change"
    ]
    assert all(len(line) <= 100 for line in stdout.splitlines())  # kernel names and long paths cut
    before_line = stdout.splitlines()[0]
    assert before_line.startswith("before " + str(long_dir)[:20]) and "\u2026" in before_line
    assert f"{os.sep}run: " in before_line  # the path's end survives the cut
    table = compare(load(H200), load(cpu_dir))
    top = table[table["level"] == "function"].iloc[0]
    change = f"{100 * (top.after_us - top.before_us) / top.before_us:+.1f}%" if top.before_us > 0 else "new"
    row = next(line for line in stdout.splitlines() if line.startswith(str(top.function_name) + " "))
    assert row.split()[-1] == change
    code, _, stderr = _run(["compare", str(cpu_dir), str(cpu_dir)])
    assert code == 0 and stderr == ""  # same source and device: no warning


def test_version_and_help(capsys):
    from aitune_dispatch import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"aitune-dispatch {__version__}\n"
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    demo_help = " ".join(capsys.readouterr().out.split())
    assert "Profile the built-in demo model." in demo_help  # a description, not only a usage line
    assert "--warmup N" in demo_help and "--top N" in demo_help and "--out DIR" in demo_help  # metavars
    assert "default: auto, i.e. cuda when available, else cpu" in demo_help
    with pytest.raises(SystemExit):
        main(["--help"])
    top_help = capsys.readouterr().out
    assert "``" not in top_help  # no raw RST markup
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "--html FILE.html" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "R", "--html", "x.pdf"], "argument --html: the HTML report must end in .html or .htm; got 'x.pdf'"),
        (["report", "R", "--perfetto", "t.txt"], "the trace must end in .json or .json.gz"),
        (["compare", "A", "B", "--csv", "d.tsv"], "the CSV file must end in .csv"),
        (["demo", "--html", "x.html"], "unrecognized arguments"),
    ],
)
def test_output_names_are_checked_before_any_work(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing loaded, nothing written


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit):
        main(["demo", "--device", "cpu", "--out", str(tmp_path / "file")])
    assert "is a file; --out takes a folder" in capsys.readouterr().err


def test_unknown_function_names_warn_in_one_line(models):
    argv = ["profile", "cli_models:build_wide", "--device", "cpu", "--warmup", "0", "-q", "--function-names", "lnear"]
    code, _, stderr = _run(argv)
    assert code == 0
    (line,) = stderr.splitlines()
    assert line.startswith("aitune-dispatch: warning: function_names has names that are not torch.nn.functional")
    assert line.endswith("['lnear']") and "UserWarning" not in line and "warnings.warn" not in line


def test_narrow_terminal_cuts_every_name_column_and_wraps_titles(monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    code, stdout, _ = _run(["compare", str(H200), str(H200), "--top", "3"])
    assert code == 0
    assert all(len(line) <= 70 for line in stdout.splitlines()), stdout
    # a kernel name keeps half the width (35 of 70 columns): before and after are left out, the function is cut
    per_kernel = stdout.split("per kernel")[1]
    assert "left out to fit 70 columns: before (µs), after (µs)" in " ".join(per_kernel.split())
    row = next(line for line in per_kernel.splitlines() if line.startswith("scaled_dot"))
    function, kernel = re.split(r"\s{2,}", row)[:2]
    assert function.endswith("\u2026") and kernel.startswith("fmha_cutla") and kernel.endswith("\u2026"), row
    assert len(kernel) == 70 // 2 and len(function) < len(kernel)
    code, stdout, _ = _run(["report", str(H200), "-q"])
    title = stdout.splitlines()[:2]  # the title wraps instead of running past the edge
    assert all(len(line) <= 70 for line in title) and title[1].startswith("  "), title


def test_format_table_shares_the_cut_between_flexible_columns():
    from aitune_dispatch.reports.text import Column, format_table

    columns = [Column("a", numeric=False, flexible=True), Column("b", numeric=False, flexible=True), Column("n")]
    table = format_table(columns, [["x" * 20, "y" * 30, "1"]], width=40)
    # 20 + 30 + 1 + 2 gaps of 2 = 55: 15 too many, taken from the wider column first (30 -> 20), then both
    x, y, number = re.split(r"\s{2,}", table.splitlines()[2])
    assert x.rstrip("\u2026") == "x" * (len(x) - 1) and y.rstrip("\u2026") == "y" * (len(y) - 1) and number == "1"
    assert {len(x), len(y)} == {17, 18} and len(table.splitlines()[2]) == 40
    assert table.splitlines()[:2] == [
        "a" + " " * (len(x) + 1) + "b" + " " * (len(y) + 1) + "n",
        "-" * len(x) + "  " + "-" * len(y) + "  -",
    ]
    # too many fixed columns: the line grows past the width rather than hiding numbers
    wide = format_table(
        [Column("name", numeric=False, flexible=True), *(Column(f"n{i}") for i in range(9))],
        [["a" * 30, *("123.4",) * 9]],
        width=40,
    )
    assert wide.splitlines()[2].endswith("123.4") and wide.splitlines()[2].count("123.4") == 9


def test_compare_warns_when_the_gpus_differ(tmp_path):
    import dataclasses

    from aitune_dispatch.reports.text import mismatch_warning

    h200 = load(H200)
    on = {name: dataclasses.replace(h200, metadata={**h200.metadata, "gpu_name": name}) for name in ("H100", "H200")}
    unnamed = dataclasses.replace(h200, metadata={k: v for k, v in h200.metadata.items() if k != "gpu_name"})
    assert mismatch_warning(on["H200"], on["H200"]) is None and mismatch_warning(unnamed, on["H100"]) is None
    assert mismatch_warning(on["H100"], on["H200"]) == (
        "comparing cupti/native on H100 with cupti/native on H200: another GPU runs other kernels (names, tile "
        "sizes) at other speeds, so the difference is not a like-for-like change"
    )


def test_a_closed_pipe_ends_quietly(tmp_path):
    script = "import subprocess as s, sys; p = s.Popen(sys.argv[1:], stdout=s.PIPE, stderr=s.PIPE)"
    script += "; p.stdout.close(); print(p.wait(), repr(p.stderr.read().decode()))"  # `| head -0`, in effect
    argv = [sys.executable, "-m", "aitune_dispatch", "report", str(H200), "-q"]
    run = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["141", "''"], run.stdout  # no traceback, SIGPIPE's status


def test_the_docs_cli_session_is_what_the_cli_prints(tmp_path, monkeypatch, capsys):
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "cli.md").read_text(encoding="utf-8")
    session = page[page.index("$ aitune-dispatch report tests/data/h200_demo_result --out out/h200") :]
    session = session[: session.index("```")].splitlines()
    commands = [i for i, line in enumerate(session) if line.startswith("$ ")]
    assert len(commands) == 2
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(H200.parent)  # the README's relative paths, from a scratch folder
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    code, stdout, _ = _run(session[0][len("$ aitune-dispatch ") :].split())
    assert code == 0 and stdout.splitlines() == session[1 : commands[1]]
    with pytest.raises(SystemExit):
        main(session[commands[1]][len("$ aitune-dispatch ") :].split())
    assert capsys.readouterr().err.splitlines()[-1] == session[commands[1] + 1]  # refused in one line
    # the README's screenshot is the committed one that tests/test_reports_browser.py makes
    assert "![HTML report of the demo model](docs/report.png)" in (root / "README.md").read_text(encoding="utf-8")
    assert (root / "docs" / "report.png").read_bytes()[:4] == b"\x89PNG"


# -- top kernels and GPU busy/idle -------------------------------------------------------------------------
def _section(lines: list[str], title: str) -> list[list[str]]:
    """The cells of the table under the line starting with ``title``, up to the next blank or title line."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rule = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("---"))
    rows = []
    for line in lines[rule + 1 :]:
        if not line.strip() or line.endswith(":"):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def test_report_names_the_top_kernels_with_their_call_and_module(monkeypatch):
    from aitune_dispatch.reports.base import kernel_labels
    from aitune_dispatch.results.views.origins import kernel_origins

    monkeypatch.setenv("COLUMNS", "250")  # as wide as the CLI goes (200)
    code, stdout, _ = _run(["report", str(H200), "--top", "4", "-q"])
    assert code == 0
    result = load(H200)
    rollup, origins = result.kernel_rollup(top=4), kernel_origins(result).head(4)
    rows = _section(stdout.splitlines(), "top kernels (4 of ")
    names = kernel_labels(list(rollup["kernel"]), list(rollup["short_name"]), 120)  # short names, told apart
    for row, name in zip(rows, names, strict=True):  # largest first, whole or cut at the end (200 columns)
        assert row[0] == name or row[0].endswith("\u2026") and name.startswith(row[0][:-1]), (row, name)
    assert [int(row[1]) for row in rows] == list(rollup["count"])
    assert [row[4] for row in rows] == [f"{100 * s:.1f}%" for s in rollup["share"]]
    assert [row[5] for row in rows] == [f if isinstance(f, str) else "(no call)" for f in origins["top_function"]]
    assert [row[6] for row in rows] == list(origins["top_module"])


def test_report_shows_the_gpu_busy_and_idle_time(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, stdout, _ = _run(["report", str(H200), "--top", "3", "-q"])
    assert code == 0
    result = load(H200)
    lines = stdout.splitlines()
    busy = result.device_busy()
    (device_row,) = _section(lines, "GPU busy time in the profiled passes")  # one device, one stream: one row
    stream = int(busy["stream"].dropna().iloc[0])
    assert device_row[:2] == ["0", str(stream)] and device_row[4] == f"{100 * busy['busy_share'][0]:.1f}%"
    assert int(device_row[6]) == busy["launches"][0]
    gaps = result.idle_gaps(top=3)
    rows = _section(lines, "longest GPU idle stretches (3 of ")
    assert [row[-1] for row in rows] == list(gaps["host_modules"])  # longest first, with the modules the host ran


def test_report_ranks_the_calls_worth_optimizing(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, stdout, _ = _run(["report", str(H200), "--top", "3", "-q"])
    assert code == 0
    ranked = load(H200).worth_optimizing(top=3)
    rows = _section(stdout.splitlines(), "worth optimizing (3 of ")
    assert [row[0] for row in rows] == list(ranked["function_name"])  # most time to gain first
    assert [row[2] for row in rows] == [str(c) for c in ranked["calls"]]
    assert [row[5] for row in rows] == [f"{100 * f:.1f}%" for f in ranked["fraction_of_bound"]]
    assert [float(row[6]) for row in rows] == [round(w, 1) for w in ranked["worth_us"]]


def test_report_says_when_the_gpus_limits_are_unknown(tmp_path):
    import dataclasses

    result = load(H200)
    unknown = dataclasses.replace(result, metadata={**result.metadata, "gpu_name": "Mystery GPU 9000"})
    unknown.save(tmp_path / "run")
    code, stdout, _ = _run(["report", str(tmp_path / "run"), "-q"])
    assert code == 0 and "worth optimizing: the limits of Mystery GPU 9000 are not known" in stdout


def test_a_cpu_result_says_it_has_no_gpu_time(two_saved):
    code, stdout, _ = _run(["report", str(two_saved[0]), "-q"])
    assert code == 0
    assert "GPU busy/idle: no GPU activity in this result (cpu activity source)" in stdout.splitlines()
    assert "busy (" not in stdout and "idle stretches" not in stdout  # no false figures
    assert "worth optimizing" not in stdout  # no bound on the CPU source


@pytest.mark.parametrize("count", ["0", "-1", "1.5", "True", "ten"])
@pytest.mark.parametrize("command", ["report", "compare", "ranks"])
def test_a_top_that_is_not_a_positive_count_is_a_usage_error_naming_top(command, count, capsys):
    argv = {"report": ["report"], "compare": ["compare", str(H200)], "ranks": ["ranks"]}[command] + [str(H200)]
    for option in ("--top", "--top-k"):  # the old spelling follows the same rule
        with pytest.raises(SystemExit) as info:
            main([*argv, f"{option}={count}", "-q"])  # "=": argparse reads a "-1" after a space as an option
        err = capsys.readouterr().err
        assert info.value.code == 2, (option, count)
        assert "argument --top" in err and f"expected a positive integer or all, got {count!r}" in err, err


def test_top_all_lists_every_row(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, stdout, _ = _run(["report", str(H200), "--top", "all", "-q"])
    assert code == 0
    result = load(H200)
    kernels = len(result.kernel_rollup())
    assert kernels > 10  # more than the default --top shows
    assert len(_section(stdout.splitlines(), f"top kernels ({kernels} of {kernels})")) == kernels


def _help_texts(parser) -> list[str]:
    """Every description and option help a parser and its subparsers show."""
    import argparse

    texts = [parser.description or ""]
    for action in parser._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            texts.append(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts += _help_texts(sub)
    return texts


@pytest.mark.parametrize("columns", ["80", "200"])
@pytest.mark.parametrize("command", ["", "demo", "profile", "report", "compare", "ranks", "bench"])
def test_every_help_fits_80_columns_and_keeps_words_whole(command, columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", columns)
    with pytest.raises(SystemExit):
        main([command, "--help"] if command else ["--help"])
    shown = capsys.readouterr().out
    limit = min(80, int(columns))
    assert all(len(line) <= limit for line in shown.splitlines()), [x for x in shown.splitlines() if len(x) > limit]
    parser = cli.build_parser()
    if command:
        parser = parser._subparsers._group_actions[0].choices[command]
    words = set(shown.split())
    for text in _help_texts(parser) if command else [parser.description]:
        cut = [word for word in text.split() if word not in words]
        assert not cut, cut  # each word of the help as written, never split at a hyphen or the edge


ELEMENTWISE = [  # demangled names that share a long prefix and differ deep inside or at the end
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float>"
    " >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>(int, T3)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda"
    ">(at::TensorIteratorBase&)::{lambda(int)#1}>(int, T3)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::MulFunctor<float> >"
    "(at::TensorIteratorBase&)::{lambda(int)#1}>(int, T3)",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::MulFunctor<float> >"
    "(at::TensorIteratorBase&)::{lambda(int)#1}>(int, T3)",
    "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemvParams<float>)",
    "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemvParams<float>)",
]


@pytest.mark.parametrize("columns", [70, 80, 100])
def test_compare_keeps_kernels_that_share_a_prefix_apart(columns):
    from aitune_dispatch.reports.text import comparison_text

    table = pd.DataFrame(
        {
            "level": "kernel",
            "function_name": ["mul"] * len(ELEMENTWISE),
            "kernel": ELEMENTWISE,
            "before_us": [float(10 + i) for i in range(len(ELEMENTWISE))],
            "after_us": [float(12 + i) for i in range(len(ELEMENTWISE))],
            "delta_us": 2.0,
        }
    )
    lines = comparison_text(table, "kernel", 20, columns).splitlines()
    assert all(len(line) <= columns for line in lines)
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    shown = [re.split(r"\s{2,}", line.strip())[1] for line in lines[rule + 1 : rule + 1 + len(ELEMENTWISE)]]
    assert lines[rule + 1 + len(ELEMENTWISE)].startswith("no noise estimate")
    assert len(shown) == len(ELEMENTWISE) and any("\u2026" in name for name in shown)  # cut to fit ...
    assert len(set(shown)) == len(ELEMENTWISE), shown  # ... yet every kernel reads differently


def test_distinct_cuts_keep_equal_names_equal_and_short_names_whole():
    from aitune_dispatch.reports.text import distinct_cuts

    names = ["elementwise_kernel<a_long_functor_add>", "elementwise_kernel<a_long_functor_mul>", "relu", "relu"]
    cuts = distinct_cuts([*names, names[0]], 20)
    assert cuts[2:4] == ["relu", "relu"] and cuts[4] == cuts[0]
    assert cuts[0] != cuts[1] and all(len(cut) == 20 for cut in cuts[:2])
    assert cuts[0].startswith("elemen") and cuts[0].endswith("_functor_add>")  # the head, then the telling tail


@pytest.mark.parametrize("columns", ["80", "120"])
def test_decimal_points_align_in_every_table(columns, two_saved, monkeypatch):
    from text_tables import misaligned, tables

    monkeypatch.setenv("COLUMNS", columns)
    for argv in (["report", str(H200)], ["report", str(two_saved[0])], ["compare", str(H200), str(two_saved[0])]):
        code, stdout, _ = _run([*argv, "-q"])
        assert code == 0
        assert len(tables(stdout)) >= 2 and misaligned(stdout) == [], stdout
    assert misaligned("t\n    n  x\n-----  -\n  1.5  a\n12.25  b") == ["n"]  # the check sees a shifted point
