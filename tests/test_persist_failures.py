"""Saves that fail and files that are not results: a failed save changes nothing and leaves nothing,
and every damaged or foreign file given to load() is a ResultFormatError that names it.

A full disk is simulated where persist touches the disk (``persist._create`` for Parquet and the
manifest, ``persist._torch_save`` for torch's own file writer, ``persist._free_bytes``): past its
free bytes a write stores what fits, then fails as the OS does. Where unprivileged mounts work
(``unshare -rm``), one test also fills a real 1 MiB tmpfs, as the issue did.
"""

from __future__ import annotations

import base64
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, ProfileResult
from aitune_dispatch.results import ResultFormatError, atomic, load, persist

pytestmark = pytest.mark.single_backend  # saving and loading trace nothing: one backend is enough

NO_SPACE = os.strerror(errno.ENOSPC)
REPO = Path(__file__).resolve().parents[1]


class Doubled(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.lin(x))


def _run(width: int) -> ProfileResult:
    model = Doubled(width)
    return ModuleFunctionKernelProfiler(device="cpu").profile_result(
        model, [((torch.randn(2, width),), {})], warmup_iterations=0
    )


@pytest.fixture(scope="module")
def small() -> ProfileResult:
    return _run(4)


@pytest.fixture(scope="module")
def big() -> ProfileResult:
    return _run(300)  # its samples hold the 300 x 300 weight: a with_tensors save of ~400 kB


@pytest.fixture(scope="module")
def big_sizes(big, tmp_path_factory) -> SimpleNamespace:
    """Bytes of a complete with_tensors save of ``big``: its tables, tensors and manifest; its single file."""
    folder = big.save(tmp_path_factory.mktemp("sizes") / "res", with_tensors=True)
    tables = sum(p.stat().st_size for p in folder.glob("*.parquet"))
    single = big.save(folder.parent / "x.parquet", with_tensors=True).stat().st_size
    tensors, manifest = ((folder / n).stat().st_size for n in ("tensors.pt", "manifest.json"))
    return SimpleNamespace(tables=tables, tensors=tensors, manifest=manifest, single=single)


class _Sink(io.RawIOBase):
    """A file on the small disk: a write past its free bytes writes what fits, then fails."""

    def __init__(self, file: io.BufferedWriter, disk: SmallDisk) -> None:
        self.file, self.disk = file, disk

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        data = bytes(data)
        granted = self.disk.take(len(data))
        self.file.write(data[:granted])
        if granted < len(data):
            raise self.disk.failure()
        return granted

    def close(self) -> None:
        self.file.close()
        super().close()


class SmallDisk:
    """A disk with ``free`` bytes left for what a save writes (see the module docstring).

    ``failure`` makes the error a full Python write raises (the OS's ``ENOSPC``; ``KeyboardInterrupt``
    for Ctrl-C). torch writes its file itself and reports a short write as its ``unexpected pos``.
    """

    def __init__(self, patch: pytest.MonkeyPatch, free: int, failure=None) -> None:
        self.free = free
        self.failure = failure or (lambda: OSError(errno.ENOSPC, NO_SPACE))
        torch_save = persist._torch_save

        def save_tensors(tensors, destination) -> None:
            torch_save(tensors, destination)
            if isinstance(destination, io.BytesIO):  # the single file: its bytes go through _create
                return
            size = destination.stat().st_size
            granted = self.take(size)
            if granted < size:
                os.truncate(destination, granted)
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 10560 vs 10512")

        patch.setattr(persist, "_create", lambda path: _Sink(open(path, "xb"), self))  # noqa: SIM115
        patch.setattr(persist, "_torch_save", save_tensors)
        patch.setattr(persist, "_free_bytes", lambda directory: self.free)

    def take(self, wanted: int) -> int:
        granted = min(wanted, self.free)
        self.free -= granted
        return granted


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder``, hidden ones too, with its bytes (None: a directory)."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


def _assert_names_the_cause(error: OSError, target: Path, kept: bool) -> None:
    message = str(error)
    assert error.errno == errno.ENOSPC, message
    assert NO_SPACE in message and f"could not save the result to {target}" in message, message
    assert "save again" in message, message
    assert ("previous result" in message and "unchanged" in message) == kept, message


# -- item 2: the single file ---------------------------------------------------------------------
@pytest.mark.parametrize("fill", [0.0, 0.5], ids=["full-from-the-start", "full-part-way"])
def test_a_failed_single_file_save_leaves_nothing(big, big_sizes, tmp_path, monkeypatch, fill):
    target = tmp_path / "x.parquet"
    with monkeypatch.context() as patch:
        SmallDisk(patch, int(fill * big_sizes.single))
        with pytest.raises(OSError) as info:
            big.save(target, with_tensors=True)
    _assert_names_the_cause(info.value, target, kept=False)
    assert _listing(tmp_path) == []  # no x.parquet, no .partial filling the disk
    big.save(target, with_tensors=True)  # the retry
    assert _listing(tmp_path) == ["x.parquet"] and load(target).activity.equals(big.activity)


@pytest.mark.parametrize("fill", [0.0, 0.5], ids=["full-from-the-start", "full-part-way"])
def test_a_failed_overwrite_of_a_single_file_keeps_it(small, big, big_sizes, tmp_path, monkeypatch, fill):
    target = small.save(tmp_path / "x.parquet")
    before = target.read_bytes()
    with monkeypatch.context() as patch:
        SmallDisk(patch, int(fill * big_sizes.single))
        with pytest.raises(OSError) as info:
            big.save(target, with_tensors=True)
    _assert_names_the_cause(info.value, target, kept=True)
    assert _listing(tmp_path) == ["x.parquet"] and target.read_bytes() == before
    assert load(target).activity.equals(small.activity)


# -- item 3: the directory -----------------------------------------------------------------------
@pytest.fixture(params=["beside", "beside-by-renames", "mount-point"])
def placement(request, monkeypatch) -> str:
    """Where the save stages: beside the target (swapped in one step, or by two renames where the OS
    cannot), or (a target that is a mount point) inside it."""
    if request.param == "beside-by-renames":
        monkeypatch.setattr(atomic, "_exchange", lambda first, second: False)
    if request.param == "mount-point":
        ismount = os.path.ismount
        monkeypatch.setattr(atomic.os.path, "ismount", lambda p: Path(p).name == "res" or ismount(p))
    return request.param


@pytest.mark.parametrize("failing", ["a table", "the tensors", "the manifest"])
def test_a_failed_resave_keeps_the_previous_result(small, big, big_sizes, tmp_path, monkeypatch, placement, failing):
    target = small.save(tmp_path / "res")
    before = _snapshot(target)
    free = {
        "a table": big_sizes.tables // 2,
        "the tensors": big_sizes.tables + big_sizes.tensors // 2,
        "the manifest": big_sizes.tables + big_sizes.tensors + big_sizes.manifest // 2,
    }[failing]
    with monkeypatch.context() as patch:
        SmallDisk(patch, free)
        with pytest.raises(OSError) as info:
            big.save(target, with_tensors=True)
    _assert_names_the_cause(info.value, target, kept=True)
    assert _listing(tmp_path) == ["res"] and _snapshot(target) == before  # no leftovers, not a byte changed
    assert load(target).activity.equals(small.activity)
    big.save(target, with_tensors=True)  # the retry: nothing of the failed save is in its way
    assert _listing(tmp_path) == ["res"] and "tensors.pt" in _listing(target)
    again = load(target, with_tensors=True)
    assert again.activity.equals(big.activity)
    assert torch.equal(again.function_data["linear"][0][1][0][1], big.function_data["linear"][0][1][0][1])


def test_a_failed_first_save_leaves_nothing(big, big_sizes, tmp_path, monkeypatch, placement):
    target = tmp_path / "res"
    with monkeypatch.context() as patch:
        SmallDisk(patch, big_sizes.tables // 3)
        with pytest.raises(OSError) as info:
            big.save(target, with_tensors=True)
    _assert_names_the_cause(info.value, target, kept=False)
    assert _listing(tmp_path) == []
    big.save(target)
    assert load(target).activity.equals(big.activity)


@pytest.mark.parametrize("name", ["res", "x.parquet"])
def test_an_interrupted_save_leaves_the_previous_result(small, big, tmp_path, monkeypatch, name):
    target = small.save(tmp_path / name)
    before = _snapshot(tmp_path)
    with monkeypatch.context() as patch:
        SmallDisk(patch, 20_000, failure=KeyboardInterrupt)  # Ctrl-C part-way through the writes
        with pytest.raises(KeyboardInterrupt):
            big.save(target, with_tensors=True)
    assert _snapshot(tmp_path) == before
    assert load(target).activity.equals(small.activity)


def test_a_tensors_error_that_is_not_the_disk_is_not_called_one(small, tmp_path, monkeypatch):
    target = small.save(tmp_path / "res")

    def broken(tensors, destination):
        raise RuntimeError("torch failed for its own reasons")

    monkeypatch.setattr(persist, "_torch_save", broken)
    with pytest.raises(RuntimeError, match="its own reasons"):
        small.save(target, with_tensors=True)  # plenty of space: torch's error as it is
    assert _listing(tmp_path) == ["res"] and load(target).activity.equals(small.activity)


def test_resaving_keeps_what_others_put_in_the_directory_and_its_mode(small, big, tmp_path, placement):
    target = big.save(tmp_path / "res", with_tensors=True)
    (target / "comments.txt").write_text("run 3: batch 2")
    (target / "plots").mkdir()
    target.chmod(0o750)
    small.save(target)
    assert (target / "comments.txt").read_text() == "run 3: batch 2" and (target / "plots").is_dir()
    assert "tensors.pt" not in _listing(target)  # the previous save's own files are replaced
    assert load(target).activity.equals(small.activity) and _listing(tmp_path) == ["res"]
    if placement != "mount-point":
        assert target.stat().st_mode & 0o777 == 0o750


def test_saving_into_the_working_directory_keeps_it(small, big, tmp_path, monkeypatch):
    """``save(".")`` (and a path through ``..``) writes where it says; the process's working directory is
    never swapped from under it, so it still exists and is where the result is."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    big.save(".", with_tensors=True)
    small.save(".")  # a re-save into the working directory
    assert Path.cwd() == work and work.is_dir() and os.getcwd() == str(work)
    assert load(".").activity.equals(small.activity) and load(work).activity.equals(small.activity)
    (tmp_path / "sub").mkdir()
    small.save(tmp_path / "sub" / ".." / "other")
    assert load(tmp_path / "other").activity.equals(small.activity)


def test_a_new_directory_gets_the_mode_mkdir_gives(small, tmp_path):
    (tmp_path / "plain").mkdir()
    saved = small.save(tmp_path / "res")
    assert saved.stat().st_mode == (tmp_path / "plain").stat().st_mode  # not mkdtemp's 0o700


def test_a_killed_saves_copy_is_no_rank_and_blocks_no_retry(small, tmp_path, monkeypatch):
    job = tmp_path / "job"
    small.save(job / "rank0")
    with monkeypatch.context() as patch:  # killed after writing, before the rename: no clean-up runs

        def killed(*args):
            raise SystemExit("killed")

        patch.setattr(atomic, "_put_in_place", killed)
        patch.setattr(atomic, "shutil", SimpleNamespace(rmtree=lambda *args, **kwargs: None))
        with pytest.raises(SystemExit):
            small.save(job / "rank1")
    (leftover,) = [p for p in job.iterdir() if p.name != "rank0"]
    assert (leftover / "manifest.json").is_file() and atomic.is_staging(leftover.name)
    assert load(job).activity.num_rows == small.activity.num_rows  # one rank: the copy is not a second
    small.save(job / "rank1")
    assert load(job).activity.num_rows == 2 * small.activity.num_rows


def test_saves_on_a_full_tmpfs(tmp_path):
    """The issue's runs on a real 1 MiB tmpfs (a mount namespace of our own, where that is allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    unshare = shutil.which("unshare")
    probe = unshare and subprocess.run(
        [unshare, "-rm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if not probe or probe.returncode:
        pytest.skip("no unprivileged tmpfs here (unshare -rm mount); the simulated disks above cover it")
    script = textwrap.dedent(
        f"""
        import json, os, shutil, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_persist_failures as t
        from aitune_dispatch import load
        disk, out = {str(disk)!r}, {{}}
        small, big = t._run(4), t._run(600)  # big: 1.4 MB of weight in its samples
        target = os.path.join(disk, "x.parquet")
        try:
            big.save(target, with_tensors=True)
        except OSError as error:
            out["file"] = [error.errno, str(error), sorted(os.listdir(disk))]
        small.save(target)
        try:
            big.save(target, with_tensors=True)
        except OSError as error:
            out["overwrite"] = [error.errno, sorted(os.listdir(disk)), load(target).activity.equals(small.activity)]
        os.unlink(target)
        target = os.path.join(disk, "res")
        small.save(target)
        try:
            big.save(target, with_tensors=True)
        except OSError as error:
            kept = load(target).activity.equals(small.activity)
            out["dir"] = [error.errno, str(error), sorted(os.listdir(disk)), kept]
        small.save(target, with_tensors=True)
        out["retry"] = load(target, with_tensors=True).activity.equals(small.activity)
        shutil.rmtree(target)
        small.save(disk)  # the mount point itself: staged inside it
        before = sorted(os.listdir(disk))
        try:
            big.save(disk, with_tensors=True)
        except OSError as error:
            kept = load(disk).activity.equals(small.activity)
            out["mount"] = [error.errno, sorted(os.listdir(disk)) == before, kept]
        small.save(disk, with_tensors=True)
        out["mount"].append(sorted(os.listdir(disk)) == sorted([*before, "tensors.pt"]))
        print(json.dumps(out))
        """
    )
    mount = f'mount -t tmpfs -o size=1m tmpfs {disk} && exec {sys.executable} -c "$0"'
    run = subprocess.run(
        [unshare, "-rm", "sh", "-c", mount, script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["file"][0] == errno.ENOSPC and NO_SPACE in out["file"][1] and out["file"][2] == []
    assert out["overwrite"] == [errno.ENOSPC, ["x.parquet"], True]
    assert out["dir"][0] == errno.ENOSPC and NO_SPACE in out["dir"][1] and "tensors.pt" in out["dir"][1]
    assert out["dir"][2:] == [["res"], True]
    assert out["retry"] is True
    assert out["mount"] == [errno.ENOSPC, True, True, True]  # failed: as it was; the retry: with its tensors


# -- issue 42, item 3: a .parquet path that is a symlink -------------------------------------------
@pytest.mark.parametrize("link", ["relative", "absolute", "dangling"])
def test_saving_through_a_symlink_replaces_the_file_it_names(small, big, big_sizes, tmp_path, monkeypatch, link):
    """The link stays a link to where it pointed, the file it names holds the new result (a dangling
    link: the file is created), a failed save through it changes neither, and nothing is left beside either."""
    store, links = tmp_path / "store", tmp_path / "links"
    store.mkdir()
    links.mkdir()
    real, alias = store / "real.parquet", links / "x.parquet"
    if link != "dangling":
        small.save(real)
    alias.symlink_to(os.path.relpath(real, links) if link == "relative" else real)
    pointer = os.readlink(alias)
    small.save(alias)
    assert alias.is_symlink() and os.readlink(alias) == pointer
    assert load(real).activity.equals(small.activity)
    before = real.read_bytes()
    with monkeypatch.context() as patch:
        SmallDisk(patch, big_sizes.single // 2)
        with pytest.raises(OSError) as info:
            big.save(alias, with_tensors=True)
    _assert_names_the_cause(info.value, alias, kept=True)
    assert alias.is_symlink() and os.readlink(alias) == pointer and real.read_bytes() == before
    big.save(alias, with_tensors=True)
    assert alias.is_symlink() and os.readlink(alias) == pointer
    assert load(real, with_tensors=True).activity.equals(big.activity)
    assert _listing(links) == ["x.parquet"] and _listing(store) == ["real.parquet"]


def test_resaving_a_parquet_file_keeps_its_mode(small, big, tmp_path):
    """The file is replaced, not rewritten in place, yet keeps its permission bits (as a directory does)."""
    target = small.save(tmp_path / "x.parquet")
    target.chmod(0o640)
    big.save(target)
    assert target.stat().st_mode & 0o777 == 0o640 and load(target).activity.equals(big.activity)


# -- issue 42, item 4: a double fault during a directory save --------------------------------------
EIO = os.strerror(errno.EIO)
USERS_FILES = {"notes.txt": b"run 3: batch 2", "plots/figure.png": b"\x89PNG, the user's own"}


def _add_users_files(folder: Path) -> dict[str, bytes | None]:
    """The user's own files in ``folder``, as :func:`_snapshot` lists them."""
    for name, data in USERS_FILES.items():
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_bytes(data)
    return {"notes.txt": USERS_FILES["notes.txt"], "plots": None, "plots/figure.png": USERS_FILES["plots/figure.png"]}


def _eio(source: object, destination: object) -> OSError:
    return OSError(errno.EIO, EIO, str(source), None, str(destination))


def _failing_renames(patch: pytest.MonkeyPatch, fails: Callable[[Path, Path], bool]) -> None:
    """``os.rename`` raises EIO, as a failing disk does, where ``fails(source, destination)``."""
    rename = os.rename

    def faulty(source, destination, *args, **kwargs):
        if fails(Path(os.path.abspath(source)), Path(os.path.abspath(destination))):
            raise _eio(source, destination)
        return rename(source, destination, *args, **kwargs)

    patch.setattr(os, "rename", faulty)


def _double_fault(case: str, target: Path, source: Path, destination: Path) -> bool:
    """Whether a rename fails in ``case``: every move of the user's files back (into ``target`` or into
    where the previous save went) fails; so does the final rename (``two renames``), or both renames that
    would put a directory at ``target`` (``no way back``); ``one-step swap``: the exchange fails (patched)."""
    moving_back = destination.parent == target or ".replaced-" in destination.parent.name
    if case == "two renames":
        return moving_back or (destination == target and ".saving-" in source.name)
    if case == "two renames, no way back":
        return moving_back or destination == target
    return moving_back


def _exchange_fails(first: Path, second: Path) -> bool:
    raise _eio(first, second)


@pytest.mark.parametrize("case", ["one-step swap", "two renames", "two renames, no way back"])
def test_a_double_fault_keeps_the_users_files_and_says_where(small, big, tmp_path, monkeypatch, case):
    """The swap and the move of the user's files back both fail (EIO): their files are kept where the
    message says, the message says truly where the previous result is, and its recipe restores both."""
    target = small.save(tmp_path / "res")
    users = _add_users_files(target)
    with monkeypatch.context() as patch:
        patch.setattr(atomic, "_exchange", _exchange_fails if case == "one-step swap" else lambda first, second: False)
        _failing_renames(patch, lambda source, destination: _double_fault(case, target, source, destination))
        with pytest.raises(OSError) as info:
            big.save(target, with_tensors=True)
    message = str(info.value)
    assert info.value.errno == errno.EIO and f"could not save the result to {target}: {EIO}" in message, message
    (holder,) = [p for p in tmp_path.iterdir() if ".saving-" in p.name]
    assert _snapshot(holder) == users  # every byte of the user's, and nothing of the failed save
    assert str(holder) in message and "notes.txt" in message and "plots" in message, message
    if case == "two renames, no way back":
        (previous,) = [p for p in tmp_path.iterdir() if ".replaced-" in p.name]
        assert not target.exists() and load(previous).activity.equals(small.activity)
        assert str(previous) in message and "unchanged" not in message, message
        os.rename(previous, target)  # what the message says to do
    else:
        assert load(target).activity.equals(small.activity) and "previous result" in message and "unchanged" in message
        assert _listing(tmp_path) == sorted(["res", holder.name])
    for entry in holder.iterdir():
        os.rename(entry, target / entry.name)
    holder.rmdir()
    big.save(target, with_tensors=True)  # the retry, with nothing of the user's lost
    assert _listing(tmp_path) == ["res"] and load(target).activity.equals(big.activity)
    assert {name: data for name, data in _snapshot(target).items() if name in users} == users


def test_an_interrupt_whose_undo_fails_keeps_the_users_files(small, big, tmp_path, monkeypatch):
    """Ctrl-C during the swap, and the user's files cannot be moved back: they are kept, and named."""
    target = small.save(tmp_path / "res")
    users = _add_users_files(target)

    def interrupted(first: Path, second: Path) -> bool:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(atomic, "_exchange", interrupted)
        _failing_renames(patch, lambda source, destination: destination.parent == target)
        with pytest.raises(KeyboardInterrupt) as info:
            big.save(target)
    (holder,) = [p for p in tmp_path.iterdir() if ".saving-" in p.name]
    assert _snapshot(holder) == users and load(target).activity.equals(small.activity)
    if sys.version_info >= (3, 11):  # exception notes
        assert any(str(holder) in note for note in info.value.__notes__), info.value.__notes__


def test_a_failure_while_replacing_in_place_does_not_call_the_result_unchanged(small, big, tmp_path, monkeypatch):
    """A mount point is replaced entry by entry, its manifest removed first: a failure part-way leaves a
    save that no longer loads, and the message says so (not "unchanged"); the user's files are untouched."""
    target = small.save(tmp_path / "res")
    users = _add_users_files(target)
    ismount = os.path.ismount
    monkeypatch.setattr(atomic.os.path, "ismount", lambda p: Path(p).name == "res" or ismount(p))
    replace, moved = os.replace, []

    def failing_second(source, destination):
        moved.append(destination)
        if len(moved) == 2:
            raise _eio(source, destination)
        return replace(source, destination)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", failing_second)
        with pytest.raises(OSError) as info:
            big.save(target)
    message = str(info.value)
    assert info.value.errno == errno.EIO and "unchanged" not in message and "no longer loads" in message, message
    with pytest.raises(ResultFormatError):
        load(target)  # as the message says
    assert {name: data for name, data in _snapshot(target).items() if name in users} == users
    assert not [p for p in target.iterdir() if atomic.is_staging(p.name)]  # nothing of ours left but the tables
    assert "move your files out and delete its *.parquet files" in message, message
    aside = tmp_path / "aside"  # what the message says to do
    aside.mkdir()
    for name in ("notes.txt", "plots"):
        os.rename(target / name, aside / name)
    for table in target.glob("*.parquet"):
        table.unlink()
    big.save(target)
    assert load(target).activity.equals(big.activity)


# -- item 8: damaged and foreign files -------------------------------------------------------------
def _in_dir(change):
    """A damage that applies ``change`` to a directory's manifest."""

    def damage(folder: Path) -> None:
        manifest = json.loads((folder / "manifest.json").read_text())
        change(manifest)
        (folder / "manifest.json").write_text(json.dumps(manifest))

    return damage


def _in_file(change):
    """A damage that applies ``change`` to a single file's manifest (the file is rewritten)."""

    def damage(path: Path) -> None:
        table = pq.read_table(path)
        manifest = json.loads(table.schema.metadata[persist.MANIFEST_KEY])
        change(manifest)
        _rewrite(path, table, json.dumps(manifest).encode())

    return damage


def _rewrite(path: Path, table: pa.Table, manifest: bytes | None = None) -> None:
    metadata = table.schema.metadata or {}
    pq.write_table(table.replace_schema_metadata({**metadata, persist.MANIFEST_KEY: manifest or b""}), path)


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _junk_samples(folder: Path) -> None:
    table = pq.read_table(folder / "function_data.parquet")
    column = table.schema.get_field_index("sample_json")
    junk = pa.array(["{not json"] * table.num_rows, table.schema.field(column).type)
    pq.write_table(table.set_column(column, table.schema.field(column), junk), folder / "function_data.parquet")


def _drop_column(name: str):
    def damage(path: Path) -> None:
        table = pq.read_table(path)
        _rewrite(path, table.drop_columns([name]), table.schema.metadata[persist.MANIFEST_KEY])

    return damage


def _junk_tensors(path: Path) -> None:
    table = pq.read_table(path)
    column = table.schema.get_field_index("tensors.torch_save")
    values = [b"junk" if v is not None else None for v in table.column(column).to_pylist()]
    junk = pa.array(values, table.schema.field(column).type)
    _rewrite(
        path, table.set_column(column, table.schema.field(column), junk), table.schema.metadata[persist.MANIFEST_KEY]
    )


def _set(key, value):
    return lambda manifest: manifest.__setitem__(key, value)


def _set_table(table, key, value):
    return lambda manifest: manifest["tables"][table].__setitem__(key, value)


def _set_table_entry(name):
    return lambda manifest: manifest["tables"].__setitem__(name, {"rows": 0, "schema": ""})


def _add_row(table):
    return lambda manifest: manifest["tables"][table].__setitem__("rows", manifest["tables"][table]["rows"] + 1)


GARBAGE_SCHEMA = base64.b64encode(b"\xff\xff\xff\xff garbage, not an Arrow IPC schema").decode()


class Damage(NamedTuple):
    case: str
    damage: Callable[[Path], object]
    named: str  # the file the message names, relative to the save ("": the save itself)
    what: str  # what the message says is wrong
    with_tensors: bool = False


DIRECTORY_DAMAGES = [
    Damage("manifest not JSON", lambda d: (d / "manifest.json").write_text("{not"), "manifest.json", "not valid JSON"),
    Damage(
        "manifest binary",
        lambda d: (d / "manifest.json").write_bytes(b"\xff\xfe\xfa"),
        "manifest.json",
        "not valid JSON",
    ),
    Damage("no tables", _in_dir(lambda m: m.pop("tables")), "manifest.json", "without 'tables'"),
    Damage("tables a list", _in_dir(_set("tables", ["activity"])), "manifest.json", "without 'tables'"),
    Damage("entry without schema", _in_dir(lambda m: m["tables"]["calls"].pop("schema")), "manifest.json", "'calls'"),
    Damage("table name a path", _in_dir(_set_table_entry("../calls")), "manifest.json", "'../calls'"),
    Damage("version a string", _in_dir(_set("schema_version", "1")), "manifest.json", "schema_version is '1', not an"),
    Damage("version a bool", _in_dir(_set("schema_version", True)), "manifest.json", "schema_version is True, not an"),
    Damage(
        "schema not Arrow",
        _in_dir(_set_table("activity", "schema", GARBAGE_SCHEMA)),
        "manifest.json",
        "table 'activity' that is not an Arrow schema",
    ),
    Damage(
        "schema not base64",
        _in_dir(_set_table("activity", "schema", "!!")),
        "manifest.json",
        "table 'activity' that is not an Arrow schema",
    ),
    Damage("table missing", lambda d: (d / "calls.parquet").unlink(), "calls.parquet", "missing"),
    Damage("table truncated", lambda d: _truncate(d / "activity.parquet"), "activity.parquet", "truncated"),
    Damage("table empty", lambda d: (d / "ops.parquet").write_bytes(b""), "ops.parquet", "not a readable Parquet file"),
    Damage(
        "table of another",
        lambda d: shutil.copy(d / "modules.parquet", d / "calls.parquet"),
        "calls.parquet",
        "does not have the columns",
    ),
    Damage("rows differ", _in_dir(_add_row("ops")), "ops.parquet", "holds"),
    Damage("no source", _in_dir(lambda m: m.pop("source")), "", "'source' is None"),
    Damage("metadata a list", _in_dir(_set("metadata", [])), "", "'metadata' is []"),
    Damage("samples not JSON", _junk_samples, "", "function_data"),
    Damage("tensors name a path", _in_dir(_set("tensors", "../elsewhere.pt")), "manifest.json", "'tensors'"),
    Damage("tensors truncated", lambda d: _truncate(d / "tensors.pt"), "tensors.pt", "cannot be read", True),
    Damage("tensors empty", lambda d: (d / "tensors.pt").write_bytes(b""), "tensors.pt", "cannot be read", True),
    Damage("tensors missing", lambda d: (d / "tensors.pt").unlink(), "tensors.pt", "missing", True),
]
FILE_DAMAGES = [
    Damage("manifest not JSON", lambda p: _rewrite(p, pq.read_table(p), b"{not"), "", "not valid JSON"),
    Damage("no tables", _in_file(lambda m: m.pop("tables")), "", "without 'tables'"),
    Damage("version a string", _in_file(_set("schema_version", "1")), "", "not an integer"),
    Damage(
        "schema not Arrow",
        _in_file(_set_table("calls", "schema", GARBAGE_SCHEMA)),
        "",
        "table 'calls' that is not an Arrow schema",
    ),
    Damage("rows differ", _in_file(_add_row("activity")), "", "holds"),
    Damage("truncated", _truncate, "", "not a Parquet file, or a truncated one"),
    Damage("column missing", _drop_column("calls.start_ns"), "", "lacks the columns ['calls.start_ns']"),
    Damage("discriminator missing", _drop_column("table"), "", "lacks the columns ['table'"),
    Damage("tensors junk", _junk_tensors, "", "cannot be read", True),
]


@pytest.fixture(scope="module")
def saved(big, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("saved")
    return {layout: big.save(folder / layout, with_tensors=True) for layout in ("res", "x.parquet")}


def _damaged_copy(saved: Path, tmp_path: Path) -> Path:
    copy = tmp_path / saved.name
    (shutil.copytree if saved.is_dir() else shutil.copy)(saved, copy)
    return copy


@pytest.mark.parametrize(
    ("layout", "damage"),
    [*(("res", d) for d in DIRECTORY_DAMAGES), *(("x.parquet", d) for d in FILE_DAMAGES)],
    ids=lambda value: value.case if isinstance(value, Damage) else value,
)
def test_a_damaged_result_is_a_result_format_error(saved, tmp_path, layout, damage):
    path = _damaged_copy(saved[layout], tmp_path)
    damage.damage(path)
    with pytest.raises(ResultFormatError) as info:
        load(path, with_tensors=damage.with_tensors)
    message = str(info.value)
    assert str(path / damage.named if damage.named else path) in message, message  # the file
    assert damage.what in message, message  # what is wrong
    assert "save the result again" in message, message  # what to do
    assert isinstance(info.value, ValueError) and aitune_dispatch.ResultFormatError is ResultFormatError


@pytest.mark.parametrize("layout", ["res", "x.parquet"])
def test_the_damage_helpers_alone_change_nothing(saved, tmp_path, layout):
    """The control: rewriting the way the damages do, without damaging, still loads (so each damage is the cause)."""
    path = _damaged_copy(saved[layout], tmp_path)
    if layout == "res":
        _in_dir(lambda manifest: None)(path)
    else:
        _in_file(lambda manifest: None)(path)
    loaded = load(path, with_tensors=True)
    assert loaded.activity.num_rows and loaded.function_data


def test_the_cli_bench_reports_damaged_tensors_instead_of_dropping_them(saved, tmp_path):
    from aitune_dispatch import cli

    path = _damaged_copy(saved["res"], tmp_path)
    _truncate(path / "tensors.pt")
    with pytest.raises(cli.CliError, match="tensors.pt"):
        cli._load_for_bench(str(path))
