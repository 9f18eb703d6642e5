"""The CLI writes every file through the renderer registry and prints the summary through ``TextRenderer``.

A format registered in ``reports.RENDERERS`` is one the CLI writes (``--write FILE``, and under
``--out DIR`` where it names a ``default_name``) with no change to cli.py; ``--html``,
``--perfetto`` and ``--out`` name files of the registered formats.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from fixture_results import synthetic_result

from aitune_dispatch import reports
from aitune_dispatch.cli import main
from aitune_dispatch.reports import Renderer, TextRenderer
from aitune_dispatch.results import ProfileResult

pytestmark = pytest.mark.single_backend  # saved hand-made results; no tracing backend involved


class RowCount(Renderer):
    """A throwaway format: the activity row count, one line."""

    extension = ".rows"
    extensions = (".rows", ".rows.txt")

    def render(self, result: ProfileResult) -> str:
        return f"{result.activity.num_rows} activity rows\n"


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "saved"
    synthetic_result().save(path)
    return path


def test_a_registered_renderer_is_written_with_no_cli_change(saved, tmp_path, monkeypatch, capsys):
    target = tmp_path / "out" / "count.rows"
    with pytest.raises(SystemExit) as refused:  # unregistered: refused before any work, as any bad name
        main(["report", str(saved), "--write", str(target)])
    assert refused.value.code == 2 and "no report format writes '.rows'" in capsys.readouterr().err
    monkeypatch.setattr(reports, "RENDERERS", (*reports.RENDERERS, RowCount))
    code, stdout, stderr = _run(["report", str(saved), "--write", str(target)])
    assert code == 0, stderr
    assert target.read_text() == f"{synthetic_result().activity.num_rows} activity rows\n"
    assert stdout.splitlines()[-1] == f"wrote {target}"
    # a format with a default_name is one --out writes too, after the formats registered before it
    monkeypatch.setattr(RowCount, "default_name", "count.rows")
    code, stdout, stderr = _run(["report", str(saved), "--out", str(tmp_path / "d")])
    assert code == 0, stderr
    written = [line.removeprefix("wrote ") for line in stdout.splitlines() if line.startswith("wrote ")]
    assert written == [str(tmp_path / "d" / name) for name in ("report.html", "trace.json", "count.rows")]
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert ".rows.txt" in " ".join(capsys.readouterr().out.split())  # --write's help lists the endings


def test_flags_name_outputs_and_replace_the_folders_file_of_their_format(saved, tmp_path):
    # --perfetto names the trace, so --out DIR writes DIR/report.html and no DIR/trace.json; the
    # files come in registry order (HTML first), then the --write files of other names
    trace, extra, folder = tmp_path / "t.json.gz", tmp_path / "extra.htm", tmp_path / "d"
    argv = ["report", str(saved), "--perfetto", str(trace), "--out", str(folder), "--write", str(extra)]
    code, stdout, stderr = _run(argv)
    assert code == 0, stderr
    written = [line.removeprefix("wrote ") for line in stdout.splitlines() if line.startswith("wrote ")]
    assert written == [str(extra), str(trace)]  # extra.htm is the HTML file named: it replaces DIR/report.html
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extra.htm", "saved", "t.json.gz"]


def test_the_summary_is_printed_by_the_text_renderer(saved, monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    monkeypatch.chdir(saved.parent)  # a short path: the title is not cut
    code, stdout, _ = _run(["report", "saved", "--top-k", "2"])
    assert code == 0
    title = f"saved ({synthetic_result().source} activity source; shares of all kernel time)"
    expected = TextRenderer(top_k=2, width=90, title=title).render(synthetic_result())
    assert stdout == expected + "\n"
    # and nothing else prints it: a changed renderer is what the CLI shows
    monkeypatch.setattr(TextRenderer, "render", lambda self, result: f"rendered {self.top_k} {self.width}")
    code, stdout, _ = _run(["report", "saved", "--top-k", "2"])
    assert code == 0 and stdout == "rendered 2 90\n"
