"""Writing beside a path and putting it in place only when complete: a failed save changes nothing.

A save writes into a staging file or directory next to its target (same file system, a hidden
name that :func:`is_staging` recognises) and renames it onto the target once everything is
written; on any failure, Ctrl-C included, the staging copy is removed and the target is as it was.
A directory is swapped in one step where the OS can (Linux ``renameat2(RENAME_EXCHANGE)``),
elsewhere by two renames. A target directory that is a mount point cannot be renamed: it is
staged inside itself and its entries are replaced one by one (each file atomically, the manifest
last), which still keeps the previous result when writing fails, though not when the process is
killed mid-way.
"""

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
    """Whether ``name`` is one of the staging names a save writes into (left only by a killed save).

    Parameters
    ----------
    name:
        A file or directory name.

    Returns
    -------
    bool
        True for ``.<target>.saving-<hex>`` and ``.<target>.replaced-<hex>``.
    """
    return _STAGING.match(name) is not None


def _sibling(target: Path, purpose: str) -> Path:
    return target.with_name(f".{target.name}.{purpose}-{secrets.token_hex(4)}")


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
    """A path beside ``target`` to write; it replaces ``target`` when the block completes.

    Parameters
    ----------
    target:
        The file to write (its folder must exist).

    Returns
    -------
    Iterator[pathlib.Path]
        The staging path (not yet created). On any exception it is removed and ``target`` is untouched.
    """
    staging = _sibling(target, "saving")
    try:
        yield staging
        os.replace(staging, target)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


@contextmanager
def replacing_directory(target: Path, owned: Collection[str], marker: str) -> Iterator[Path]:
    """A new directory beside ``target`` to fill; it takes ``target``'s place when the block completes.

    Parameters
    ----------
    target:
        The directory to write (new, empty, or holding a previous save; a symlink is followed).
    owned:
        The names in ``target`` that the save replaces (the previous result's files). Every other
        entry of ``target`` is kept: it is moved into the new directory.
    marker:
        The entry that makes the directory a complete save (the manifest): put in place last.

    Returns
    -------
    Iterator[pathlib.Path]
        The staging directory. On any exception it is removed and ``target`` is untouched.
    """
    target = target.resolve() if target.is_symlink() else Path(os.path.abspath(target))  # "." and "a/.." named
    target.parent.mkdir(parents=True, exist_ok=True)
    # a mount point cannot be renamed, and the working directory (or one holding it) must not be
    # swapped from under the process: both are staged inside themselves and their files replaced
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
