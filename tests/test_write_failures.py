"""Reports, traces and the CLI's CSV files are written as results are saved: beside the target and put
in place only when complete, so a full disk keeps the previous file, and the error names the path.

A full disk is simulated at ``open``: a file opened for writing under the test's folder stores what
fits in the disk's free bytes, then fails as the OS does (``OSError(ENOSPC)``, no file name).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
from pathlib import Path

import pytest
from fixture_results import layered_result, synthetic_result

from aitune_dispatch import cli
from aitune_dispatch.reports import write_perfetto, write_report

pytestmark = pytest.mark.single_backend  # hand-made results; no tracing backend involved

NO_SPACE = os.strerror(errno.ENOSPC)
WRITERS = {
    "report.html": write_report,
    "trace.json": write_perfetto,
    "trace.json.gz": write_perfetto,
}


class _FullFile:
    """A file on the small disk: a write past its free bytes writes what fits, then fails."""

    def __init__(self, file, disk: SmallDisk) -> None:
        self.file, self.disk = file, disk

    def write(self, data) -> int:
        granted = self.disk.take(len(data))
        self.file.write(data[:granted])
        if granted < len(data):
            self.file.flush()
            raise OSError(errno.ENOSPC, NO_SPACE)
        return len(data)

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.file.close()


class SmallDisk:
    """``folder`` on a disk with ``free`` bytes left: every file opened there for writing shares them."""

    def __init__(self, patch: pytest.MonkeyPatch, folder: Path, free: int) -> None:
        self.free = free
        real_open = open

        def small_open(file, mode="r", *args, **kwargs):
            opened = real_open(file, mode, *args, **kwargs)
            inside = isinstance(file, (str, os.PathLike)) and Path(os.path.abspath(file)).is_relative_to(folder)
            return _FullFile(opened, self) if inside and set(mode) & set("wxa") else opened

        patch.setattr("builtins.open", small_open)
        patch.setattr(io, "open", small_open)  # what pathlib opens with

    def take(self, wanted: int) -> int:
        granted = min(wanted, self.free)
        self.free -= granted
        return granted


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def _assert_names_the_path(error: OSError, target: Path, kept: bool) -> None:
    message = str(error)
    assert error.errno == errno.ENOSPC and NO_SPACE in message and str(target) in message, message
    assert ("unchanged" in message) == kept and "Free some space" in message, message


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_failed_rewrite_keeps_the_previous_file(tmp_path, monkeypatch, name):
    target = WRITERS[name](synthetic_result(), tmp_path / name)
    before = target.read_bytes()
    with monkeypatch.context() as patch:
        SmallDisk(patch, tmp_path, len(before) // 2)  # the new file is as large: half of it fits
        with pytest.raises(OSError) as info:
            WRITERS[name](synthetic_result(), target)
    assert os.listdir(tmp_path) == [name] and target.read_bytes() == before  # no truncated file, no leftover
    _assert_names_the_path(info.value, target, kept=True)
    WRITERS[name](layered_result(), target)  # the retry
    assert os.listdir(tmp_path) == [name] and target.read_bytes() != before


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_failed_first_write_leaves_nothing(tmp_path, monkeypatch, name):
    target = tmp_path / "out" / name
    with monkeypatch.context() as patch:
        SmallDisk(patch, tmp_path, 100)
        with pytest.raises(OSError) as info:
            WRITERS[name](synthetic_result(), target)
    assert os.listdir(tmp_path / "out") == []
    _assert_names_the_path(info.value, target, kept=False)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_rewrite_keeps_the_files_mode_and_symlink(tmp_path, name):
    """What writing in place kept: the file's permission bits, and a symlink stays one (its file rewritten)."""
    store, links = tmp_path / "store", tmp_path / "links"
    links.mkdir()
    real = WRITERS[name](synthetic_result(), store / name)
    real.chmod(0o640)
    alias = links / name
    alias.symlink_to(real)
    WRITERS[name](layered_result(), alias)
    assert alias.is_symlink() and alias.resolve() == real and real.stat().st_mode & 0o777 == 0o640
    assert os.listdir(links) == [name] and os.listdir(store) == [name]
    assert real.read_bytes() == WRITERS[name](layered_result(), tmp_path / name).read_bytes()


@pytest.mark.parametrize("option", ["--html", "--perfetto"])
def test_the_cli_report_keeps_the_previous_file_on_a_full_disk(tmp_path, monkeypatch, option):
    saved = synthetic_result().save(tmp_path / "saved")
    out = tmp_path / "out"
    target = out / ("report.html" if option == "--html" else "trace.json")
    assert _run(["report", str(saved), option, str(target)])[0] == 0
    before = target.read_bytes()
    with monkeypatch.context() as patch:
        SmallDisk(patch, out, len(before) // 2)
        code, _, stderr = _run(["report", str(saved), option, str(target)])
    assert os.listdir(out) == [target.name] and target.read_bytes() == before
    assert code == 1 and str(target) in stderr and NO_SPACE in stderr and "unchanged" in stderr, stderr


@pytest.mark.parametrize(("option", "name"), [("--csv", "diff.csv"), ("--html", "compare.html")])
def test_the_cli_compare_keeps_the_previous_file_on_a_full_disk(tmp_path, monkeypatch, option, name):
    a, b = synthetic_result().save(tmp_path / "a"), synthetic_result().save(tmp_path / "b.parquet")
    out = tmp_path / "out"
    out.mkdir()
    written = out / name
    assert _run(["compare", str(a), str(b), option, str(written)])[0] == 0
    before = written.read_bytes()
    with monkeypatch.context() as patch:
        SmallDisk(patch, out, len(before) // 2)
        code, _, stderr = _run(["compare", str(b), str(a), option, str(written)])
    assert os.listdir(out) == [name] and written.read_bytes() == before
    assert code == 1 and str(written) in stderr and NO_SPACE in stderr and "unchanged" in stderr, stderr
