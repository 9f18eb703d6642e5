"""Saves that fail: a failed save changes nothing and leaves nothing, so that a retry works.

A full disk is simulated where persist touches the disk (``persist._create`` for Parquet and the
manifest, ``persist._torch_save`` for torch's own file writer, ``persist._free_bytes``): past its
free bytes a write stores what fits, then fails as the OS does. Where unprivileged mounts work
(``unshare -rm``), one test also fills a real 1 MiB tmpfs, as the issue did.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, ProfileResult
from aitune_dispatch.results import atomic, load, persist

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
    (target / "notes.md").write_text("run 3: batch 2")
    (target / "plots").mkdir()
    target.chmod(0o750)
    small.save(target)
    assert (target / "notes.md").read_text() == "run 3: batch 2" and (target / "plots").is_dir()
    assert "tensors.pt" not in _listing(target)  # the previous save's own files are replaced
    assert load(target).activity.equals(small.activity) and _listing(tmp_path) == ["res"]
    if placement != "mount-point":
        assert target.stat().st_mode & 0o777 == 0o750


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
