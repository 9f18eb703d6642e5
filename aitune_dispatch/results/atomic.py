"""Writing beside a path and putting it in place only when complete, so a failed save changes
nothing and a retry just works (``docs/design.md``, "Saving")."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["is_staging", "replacing_directory", "replacing_file"]

_STAGING = re.compile(r"^\..+\.(saving|replaced)-[0-9a-f]{8}$")


def is_staging(name: str) -> bool:
    """Whether ``name`` is a staging name a save writes into (left only by a killed save)."""
    return _STAGING.match(name) is not None


def _sibling(target: Path, purpose: str) -> Path:
    return target.with_name(f".{target.name}.{purpose}-{secrets.token_hex(4)}")


def _followed(target: Path) -> Path:
    """``target``, or the path its symlink (chain) ends at: what a save through a link replaces."""
    return target.resolve() if target.is_symlink() else target


def _new_directory(beside: Path, within: Path) -> Path:
    while True:
        candidate = within / _sibling(beside, "saving").name
        try:
            candidate.mkdir()  # the mode a plain mkdir gives (mkdtemp's would be 0o700)
            return candidate
        except FileExistsError:
            continue


@contextmanager
def replacing_file(target: Path) -> Iterator[Path]:
    """A path beside ``target`` (not yet created) that replaces it when the block completes.

    A symlinked ``target`` is followed: the file it names is replaced, the link kept. The new file
    gets the permission bits of the one it replaces, as writing in place would have kept them.
    Parent folders are created.
    """
    target = _followed(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = _sibling(target, "saving")
    try:
        yield staging
        _keep_mode(target, staging)
        os.replace(staging, target)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def _keep_mode(target: Path, staging: Path) -> None:
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:  # a new file: the mode open gives
        return
    os.chmod(staging, stat.S_IMODE(mode))


@contextmanager
def replacing_directory(target: Path, owned: Collection[str], marker: str) -> Iterator[Path]:
    """A new directory beside ``target`` to fill; it takes ``target``'s place when the block completes.

    The ``owned`` entries of ``target`` are replaced, every other one kept; ``marker`` (the manifest)
    is put in place last. A symlinked ``target`` is followed.
    """
    target = Path(os.path.abspath(_followed(target)))  # "." and "a/.." named
    target.parent.mkdir(parents=True, exist_ok=True)
    # a mount point cannot be renamed, nor the working directory swapped away: staged inside themselves
    cwd = Path(os.getcwd())
    in_place = target.is_dir() and (os.path.ismount(target) or cwd == target or target in cwd.parents)
    staging = _new_directory(target, target if in_place else target.parent)
    try:
        if target.is_dir() and not in_place:
            os.chmod(staging, stat.S_IMODE(target.stat().st_mode))
        yield staging
        if in_place:
            _replace_entries(staging, target, owned, marker)
        else:
            _put_in_place(staging, target, owned)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _put_in_place(staging: Path, target: Path, owned: Collection[str]) -> None:
    if not target.exists():
        os.rename(staging, target)
        return
    carried: list[str] = []
    try:
        for entry in os.listdir(target):
            if entry not in owned and not is_staging(entry):
                os.rename(target / entry, staging / entry)
                carried.append(entry)
        previous = _swap(staging, target)
    except BaseException:
        for entry in carried:  # back where they were, for the caller's clean-up to leave target as it was
            os.rename(staging / entry, target / entry)
        raise
    shutil.rmtree(previous, ignore_errors=True)


def _swap(staging: Path, target: Path) -> Path:
    """Put ``staging`` at ``target``; returns where the previous ``target`` now is."""
    if _exchange(staging, target):
        return staging
    previous = _sibling(target, "replaced")
    os.rename(target, previous)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(previous, target)
        raise
    return previous


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2``); False where the OS or file system cannot."""
    if sys.platform != "linux":
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # a C library without it
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.ENOTSUP):  # not supported here: rename instead
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def _replace_entries(staging: Path, target: Path, owned: Collection[str], marker: str) -> None:
    """Move what ``staging`` (inside ``target``) holds into ``target``, file by file, ``marker`` last."""
    written = sorted(os.listdir(staging), key=lambda name: name == marker)
    (target / marker).unlink(missing_ok=True)  # the previous save stops being one first: a kill leaves no mix
    for entry in owned:
        if entry not in written and (target / entry).is_file():
            (target / entry).unlink()
    for entry in written:
        os.replace(staging / entry, target / entry)
    staging.rmdir()
