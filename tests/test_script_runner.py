"""``recording()`` without a module (roots found as they are called), ``aitune_dispatch.step()`` and the
CLI's ``run``: a script run as ``__main__`` inside such a recording, its outputs written, nothing left."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from test_region import spec_rows
from test_restoration import global_state
from torch import nn

import aitune_dispatch
from aitune_dispatch import cli, region
from aitune_dispatch.results import load
from aitune_dispatch.script import ScriptError, parse_steps, run_script

DOCS = Path(__file__).resolve().parents[1] / "docs"


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))


class Holder(nn.Module):
    """Calls a module it does not own (held in a tuple: not a submodule)."""

    def __init__(self, other: nn.Module) -> None:
        super().__init__()
        self.held = (other,)
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.held[0](self.proj(x))


def modules(result) -> list[tuple[str, str, int]]:  # noqa: ANN001
    table = result.modules.to_pydict()
    return list(zip(table["module_name"], table["module_type"], table["parent_module_id"]))


def test_roots_are_named_by_class_and_numbered_in_order_of_first_call():
    torch.manual_seed(0)
    a, b, c = MLP(), MLP(), nn.Linear(8, 4)
    x = torch.randn(2, 8)
    with torch.no_grad(), aitune_dispatch.recording(device="cpu") as rec:
        b(x)  # first called: MLP, although created second
        c(x)
        a(x)
        b(x)  # the same object again: the same root
    assert modules(rec.result) == [
        ("MLP", "MLP", -1),
        ("MLP.fc1", "Linear", 0),
        ("MLP.fc2", "Linear", 0),
        ("Linear", "Linear", -1),
        ("MLP_1", "MLP", -1),
        ("MLP_1.fc1", "Linear", 4),
        ("MLP_1.fc2", "Linear", 4),
    ]
    frame = rec.result.profiling_df()
    forwards = rec.result.module_calls["module_id"].to_pylist()
    assert [forwards.count(i) for i in (0, 3, 4)] == [2, 1, 1]  # b twice, c once, a once
    linears = [name for name, function in zip(frame["module_name"], frame["function_name"]) if function == "linear"]
    assert set(linears) == {"MLP.fc1", "MLP.fc2", "Linear", "MLP_1.fc1", "MLP_1.fc2"}


def test_modules_called_inside_a_root_are_not_roots_and_an_earlier_root_is_adopted():
    torch.manual_seed(0)
    outside, model = nn.Linear(8, 8), MLP()
    holder = Holder(outside)
    x = torch.randn(2, 8)
    with torch.no_grad(), aitune_dispatch.recording(device="cpu") as rec:
        holder(x)  # calls `outside` from inside: it is no root (and in no hierarchy, as with module=)
        model.fc1(x)  # a root for now ...
        model(x)  # ... until model, which holds it, is called: it becomes MLP.fc1
    names = [name for name, _, _ in modules(rec.result)]
    assert names == ["Holder", "Holder.proj", "MLP.fc1", "MLP", "MLP.fc2"]
    parents = {name: parent for name, _, parent in modules(rec.result)}
    assert parents["MLP.fc1"] == names.index("MLP") and parents["MLP"] == -1
    frame = rec.result.profiling_df()
    assert "Linear" not in set(frame["module_name"])
    # the held module's linear runs inside Holder, attributed to it as module= would
    assert list(frame[frame["module_name"] == "Holder"]["function_name"].unique()) == ["linear"]


def test_rows_equal_recording_models_apart_from_the_roots_name():
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(4, 8)
    with torch.no_grad():
        model(x)  # warm
        with aitune_dispatch.recording(model, device="cpu") as given:
            model(x)
            model(x)
        with aitune_dispatch.recording(device="cpu") as found:
            model(x)
            model(x)
    expected = [(("MLP." + row[0]) if row[0] else "MLP", *row[1:]) for row in spec_rows(given.result)]
    assert len(expected) > 0
    assert spec_rows(found.result) == expected
    assert set(found.result.function_data) == set(given.result.function_data)


def test_a_recording_without_module_leaves_nothing_installed_also_on_an_exception():
    model, state = MLP(), global_state()
    limit = sys.getrecursionlimit()
    with pytest.raises(ValueError, match="boom"):
        with aitune_dispatch.recording(device="cpu"):
            model(torch.randn(2, 8))
            raise ValueError("boom")
    assert global_state() == state and sys.getrecursionlimit() == limit
    assert region.active_recording() is None


def test_step_without_a_recording_does_nothing_and_with_one_advances_it():
    assert region.active_recording() is None
    aitune_dispatch.step()  # no recording: nothing, no error
    model, x = MLP(), torch.randn(2, 8)
    with torch.no_grad(), aitune_dispatch.recording(model, device="cpu", wait=1, active=2) as rec:
        assert region.active_recording() is rec
        for _ in range(4):
            model(x)
            aitune_dispatch.step()
        assert rec.step_number == 4
    assert region.active_recording() is None
    aitune_dispatch.step()  # after it: nothing again
    assert rec.step_number == 4
    assert rec.result.metadata["first_step"] == "1"
    # steps 1 and 2 recorded: two forwards, each two linears
    assert (rec.result.profiling_df()["function_name"] == "linear").sum() == 2 * 2 * 2  # ops t + addmm per call


def test_parse_steps_takes_a_colon_b_and_names_the_form():
    assert parse_steps("10:20") == (10, 20)
    for bad in ("10", "3:3", "5:2", "-1:2", "a:b"):
        with pytest.raises(ValueError, match="A:B"):
            parse_steps(bad)


SCRIPT = """
import sys
import torch
from torch import nn
import aitune_dispatch

class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))

steps = int(sys.argv[1])
model = Tiny()
seen = {"argv": list(sys.argv), "path0": sys.path[0], "name": __name__}
with torch.no_grad():
    for _ in range(steps):
        model(torch.randn(2, 4))
        aitune_dispatch.step()
sys.modules["_script_seen"] = seen
if len(sys.argv) > 2:
    if sys.argv[2] == "exit0":
        sys.exit(0)
    if sys.argv[2] == "exit3":
        sys.exit(3)
    raise RuntimeError("the script failed")
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "scripts" / "tiny.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    yield path
    sys.modules.pop("_script_seen", None)


def test_run_script_runs_it_as_main_with_its_argv_and_path_and_puts_them_back(script):
    argv, path_before = list(sys.argv), list(sys.path)
    argv_object, path_object = sys.argv, sys.path
    result = run_script(script, ["5", "exit0"], steps=(1, 3), device="cpu")
    seen = sys.modules["_script_seen"]
    assert seen == {"argv": [str(script), "5", "exit0"], "path0": str(script.parent), "name": "__main__"}
    assert sys.argv is argv_object and sys.argv == argv
    assert sys.path is path_object and sys.path == path_before
    assert [name for name, _, _ in modules(result)] == ["Tiny", "Tiny.fc"]
    assert result.metadata["first_step"] == "1"
    frame = result.profiling_df()
    assert (frame["function_name"] == "linear").sum() == 2 * 2  # steps 1 and 2, each t + addmm


def test_a_failing_script_raises_script_error_and_leaves_nothing_installed(script):
    state, argv, path_before = global_state(), list(sys.argv), list(sys.path)
    with pytest.raises(ScriptError, match="raised RuntimeError: the script failed"):
        run_script(script, ["2", "fail"], device="cpu")
    with pytest.raises(ScriptError, match="exited with status 3"):
        run_script(script, ["2", "exit3"], device="cpu")
    assert global_state() == state and sys.argv == argv and sys.path == path_before
    assert region.active_recording() is None
    assert len(run_script(script, ["1"], device="cpu").profiling_df()) > 0  # and the next run works


def test_the_cli_runs_a_script_prints_the_tables_and_writes_the_outputs(script, tmp_path, capsys):
    out = tmp_path / "out"
    status = cli.main(["run", "--steps", "0:2", "--device", "cpu", "--out", str(out), "-q", str(script), "4"])
    printed = capsys.readouterr().out
    assert status == 0
    assert re.search(r"^linear\s+2\s", printed, re.M)  # steps 0 and 1: 2 linear calls
    assert "Tiny.fc" in printed
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "result", "trace.json"]
    assert [name for name, _, _ in modules(load(out / "result"))] == ["Tiny", "Tiny.fc"]


def test_the_cli_reports_a_failing_script_in_one_line_and_exits_1(script, capsys):
    state = global_state()
    assert cli.main(["run", "--device", "cpu", "-q", str(script), "1", "fail"]) == 1
    error = capsys.readouterr().err
    assert "error:" in error and "the script failed" in error
    assert global_state() == state and region.active_recording() is None
    assert cli.main(["run", "--device", "cpu", "-q", str(script.parent / "missing.py")]) == 1
    assert "not a file" in capsys.readouterr().err
    assert cli.main(["run", "--steps", "5:9", "--device", "cpu", "-q", str(script), "2"]) == 1
    assert "2 step() call(s) ran" in capsys.readouterr().err


def test_the_cli_pages_run_example_runs(tmp_path, capsys, monkeypatch):
    """docs/cli.md's ``run`` example: its script written to a folder, its command run there."""
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    section = page.split("## A script of your own: `run`", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (command,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    (tmp_path / "train.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    words = command.split()
    assert words[0] == "aitune-dispatch"
    assert cli.main(words[1:]) == 0
    result = load(tmp_path / "out" / "train" / "result")
    names = [name for name, _, _ in modules(result)]
    assert names == ["Sequential", "Sequential.0", "Sequential.1", "Sequential.2"]
    assert result.metadata["first_step"] == "1"
    assert len(result.steps()) > 0 and set(result.steps()["steps"]) == {2}  # steps 1 and 2 of 4
