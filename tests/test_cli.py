"""The command line: demo, profile with a user factory, report, compare, progress and bad input."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from aitune_dispatch import cli
from aitune_dispatch.cli import main
from aitune_dispatch.results import ProfileResult, compare, load
from aitune_dispatch.schema import SUMMARY_COLUMNS

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


def _fake_reports() -> tuple[types.ModuleType, list]:
    calls: list = []
    module = types.ModuleType("aitune_dispatch.reports")

    def writer(kind: str):
        def write(result: ProfileResult, path: Path) -> Path:
            calls.append((kind, result, Path(path)))
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(kind)
            return Path(path)

        return write

    module.write_report, module.write_perfetto = writer("html"), writer("perfetto")
    return module, calls


@pytest.fixture
def fake_reports(monkeypatch) -> list:
    module, calls = _fake_reports()
    monkeypatch.setitem(sys.modules, "aitune_dispatch.reports", module)
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
        patch.setitem(sys.modules, "aitune_dispatch.reports", module)
        code, stdout, stderr = _run(["demo", "--device", "cpu", "--warmup", "1", "--out", str(out)])
    return code, stdout, stderr, out, calls


def test_demo_prints_the_summary_table(demo):
    code, stdout, _, _, _ = demo
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0] == "aitune_dispatch demo on cpu (cpu activity source)"
    assert lines[1].split() == SUMMARY_COLUMNS
    functions = {line.split()[1] for line in lines[2:10]}
    assert {"linear", "conv2d", "layer_norm", "scaled_dot_product_attention", "gelu", "softmax"} <= functions
    assert any(line.endswith(" us") and "coverage" in line for line in lines)


def test_demo_shows_progress_on_stderr(demo):
    _, stdout, stderr, _, _ = demo
    lines = stderr.splitlines()
    assert lines[0] == "aitune-dispatch: warmup: 1 passes of 2 calls"
    assert any(line.startswith("aitune-dispatch: warmup pass 1/1 (") for line in lines)
    assert "aitune-dispatch: recording one pass of 2 calls on cpu" in lines
    assert any(line.startswith("aitune-dispatch: recorded sample 2/2 (") for line in lines)
    assert any(line.startswith("aitune-dispatch: post-processing done: ") for line in lines)
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


def test_missing_report_renderers_give_a_note(models, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "aitune_dispatch.reports", None)  # importing it raises ImportError
    code, _, stderr = _run(["profile", "cli_models:build_wide", "--device", "cpu", "--out", str(tmp_path / "o"), "-q"])
    assert code == 0 and load(tmp_path / "o" / "result").activity.num_rows > 0
    notes = stderr.splitlines()
    assert len(notes) == 2 and all(line.startswith("aitune-dispatch: note: skipped write_") for line in notes)


# -- profile -----------------------------------------------------------------------------------------
def test_profile_a_factory_from_a_file(models):
    argv = ["profile", f"{models}:build", "--device", "cpu", "--warmup", "2", "--function-names", "linear"]
    code, stdout, stderr = _run(argv)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == f"{models}:build on cpu (cpu activity source)"
    rows = {line.split()[1]: line.split() for line in lines[2:4]}
    assert set(rows) == {"linear", "relu"}
    assert rows["linear"][2:4] == ["2.0", "2.0"]  # 2 calls, 2 distinct samples (batch 2, 3); float: NaN below
    assert rows["relu"][2:4] == ["NaN", "NaN"]  # --function-names: no samples kept for relu
    assert "aitune-dispatch: warmup pass 2/2" in stderr and "recorded sample 2/2" in stderr


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
    assert "warmup pass 1/1" in loud[2] and quiet[2] == ""
    assert quiet[1].splitlines()[1].split() == SUMMARY_COLUMNS  # the table is still printed


def test_progress_steps_are_throttled(capsys):
    slow = cli.Progress(quiet=False, interval_s=3600.0)
    for done in (1, 2, 3):
        slow.step("pass", done, 3)
    every = cli.Progress(quiet=False, interval_s=0.0)
    for done in (1, 2):
        every.step("pass", done, 2)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "aitune-dispatch: pass 3/3",  # the slow one prints only its last step
        "aitune-dispatch: pass 1/2",
        "aitune-dispatch: pass 2/2",
    ]


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


def test_report_prints_the_summary_and_writes_reports(two_saved, fake_reports, tmp_path):
    saved, _ = two_saved
    code, stdout, _ = _run(["report", str(saved), "--top-k", "1", "--out", str(tmp_path / "r")])
    assert code == 0
    lines = stdout.splitlines()
    expected = load(saved).describe(1)
    assert lines[0] == f"{saved} (cpu activity source)" and lines[1].split() == SUMMARY_COLUMNS
    assert lines[2].split()[1] == expected["function_name"][0] and len(lines) == 6  # 1 row, coverage, 2 wrote
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
    assert csv.read_text() == table.to_csv(index=False)
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
