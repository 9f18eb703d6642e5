"""Writing beside a path and putting it in place only when complete, so a failed save changes
nothing and a retry just works (``docs/design.md``, "Saving").

Files we did not write (the user's, kept in a result's directory) are never deleted: where a failure
cannot be undone, :class:`Stranded` says where things are.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["Stranded", "is_staging", "replacing_directory", "replacing_file", "write_bytes"]

_STAGING = re.compile(r"^\..+\.(saving|replaced)-[0-9a-f]{8}$")


class Stranded(OSError):
    """A failed replace that could not be undone in full: where things are now, so that the error says it truly.

    ``errno`` and ``strerror`` are the first failure's, the cause.

    Attributes
    ----------
    previous:
        Where the previous target is now: the target itself, or the hidden (:func:`is_staging`) name it was
        renamed to; None where it was partly replaced (a target replaced entry by entry).
    entries:
        The entries of the previous target that we did not write and that could not be moved back into it.
    holder:
        The folder holding ``entries``; None where there are none.
    """

    def __init__(
        self, cause: OSError, previous: Path | None, entries: Sequence[str] = (), holder: Path | None = None
    ) -> None:
        super().__init__(*((cause.errno, cause.strerror or str(cause)) if cause.errno is not None else (str(cause),)))
        self.previous, self.entries, self.holder = previous, tuple(entries), holder


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


def write_bytes(target: Path, data: bytes) -> Path:
    """Make ``data`` the whole of ``target``, put in place only when written (:func:`replacing_file`).

    Parameters
    ----------
    target:
        The file to write (a symlink is followed); parent folders are created.
    data:
        Its new content.

    Returns
    -------
    pathlib.Path
        ``target``.

    Raises
    ------
    OSError
        The disk refused, ``errno`` as the OS gave it; the message names ``target`` and says that the
        previous file there is unchanged (or that nothing was left behind).
    """
    existed = target.exists()
    try:
        with replacing_file(target) as staging, open(staging, "xb") as sink:
            sink.write(data)
    except OSError as error:
        raise _write_failed(target, error, existed) from error
    return target


def _write_failed(target: Path, error: OSError, existed: bool) -> OSError:
    """The error :func:`write_bytes` raises: the cause, the path, what was kept and what to do."""
    cause = os.strerror(error.errno) if error.errno else str(error)
    elsewhere = error.filename and not is_staging(Path(error.filename).name) and Path(error.filename) != target
    where = f" ({error.filename})" if elsewhere else ""  # a parent folder that could not be made, say
    kept = f"the previous file at {target} is unchanged" if existed else "nothing of it was left behind"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "Free some space there (or write to another disk) and try again"
    else:
        fix = "Fix that (or write somewhere else) and try again"
    message = f"could not write {target}: {cause}{where}; {kept}. {fix}"
    return OSError(error.errno, message) if error.errno else OSError(message)


@contextmanager
def replacing_directory(target: Path, owned: Collection[str], marker: str) -> Iterator[Path]:
    """A new directory beside ``target`` to fill; it takes ``target``'s place when the block completes.

    The ``owned`` entries of ``target`` are replaced, every other one kept; ``marker`` (the manifest)
    is put in place last. A symlinked ``target`` is followed. On a failure the entries we did not
    write are never deleted: those that cannot be put back stay in the staging folder (:class:`Stranded`).
    """
    target = Path(os.path.abspath(_followed(target)))  # "." and "a/.." named
    target.parent.mkdir(parents=True, exist_ok=True)
    # a mount point cannot be renamed, nor the working directory swapped away: staged inside themselves
    cwd = Path(os.getcwd())
    in_place = target.is_dir() and (os.path.ismount(target) or cwd == target or target in cwd.parents)
    staging = _new_directory(target, target if in_place else target.parent)
    carried: list[str] = []  # the entries of target (not ours) while they are in staging
    try:
        if target.is_dir() and not in_place:
            os.chmod(staging, stat.S_IMODE(target.stat().st_mode))
        yield staging
        if in_place:
            _replace_entries(staging, target, owned, marker)
        else:
            _put_in_place(staging, target, owned, carried)
    except BaseException:
        _discard(staging, carried)
        raise


def _discard(staging: Path, kept: Collection[str]) -> None:
    """Remove ``staging`` and what it holds, but for its ``kept`` entries: then the folder stays, holding them."""
    if not kept:
        shutil.rmtree(staging, ignore_errors=True)
        return
    with contextlib.suppress(OSError):  # a clean-up that fails leaves our files, never loses the user's
        for entry in os.listdir(staging):
            if entry not in kept:
                path = staging / entry
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)


def _put_in_place(staging: Path, target: Path, owned: Collection[str], carried: list[str]) -> None:
    """Swap ``staging`` in for ``target``, moving ``target``'s entries that are not ``owned`` over first.

    ``carried`` lists those entries while they are in ``staging``; on a failure they go back, and the ones
    that cannot stay listed, for the clean-up to keep.
    """
    if not target.exists():
        os.rename(staging, target)
        return
    try:
        for entry in os.listdir(target):
            if entry not in owned and not is_staging(entry):
                os.rename(target / entry, staging / entry)
                carried.append(entry)
        previous = _swap(staging, target)
    except BaseException as error:
        _carry_back(staging, target, carried, error)
        raise
    carried.clear()  # in target now, beside the new result
    shutil.rmtree(previous, ignore_errors=True)


def _carry_back(staging: Path, target: Path, carried: list[str], error: BaseException) -> None:
    """Move the ``carried`` entries back to where the previous ``target`` is, after ``error``.

    Those that cannot be moved stay in ``carried``, and the error says where they are (:func:`_stranded`).
    """
    home = error.previous if isinstance(error, Stranded) and error.previous is not None else target
    refusal: OSError | None = None
    for entry in list(carried):
        try:
            os.rename(staging / entry, home / entry)
            carried.remove(entry)
        except OSError as move_error:
            refusal = refusal or move_error
    if refusal is not None:
        what = f"{', '.join(sorted(carried))} could not be moved back into {home} ({refusal})"
        _stranded(error, home, carried, staging, what)


def _stranded(error: BaseException, previous: Path, entries: Sequence[str], holder: Path | None, what: str) -> None:
    """Say where things are after ``error``: a :class:`Stranded` raised from an OSError, a note added to any
    other exception (Ctrl-C stays Ctrl-C)."""
    if isinstance(error, OSError):
        raise Stranded(error, previous, entries, holder) from error
    if hasattr(error, "add_note"):  # Python 3.11+
        error.add_note(f"{what}: they are in {holder}" if holder else what)


def _swap(staging: Path, target: Path) -> Path:
    """Put ``staging`` at ``target``; returns where the previous ``target`` now is.

    Where the previous ``target`` cannot be put back after a failure, a :class:`Stranded` names where it is.
    """
    if _exchange(staging, target):
        return staging
    previous = _sibling(target, "replaced")
    os.rename(target, previous)
    try:
        os.rename(staging, target)
    except BaseException as error:
        try:
            os.rename(previous, target)
        except OSError as refusal:
            _stranded(error, previous, (), None, f"{target} could not be moved back from {previous} ({refusal})")
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
    """Move what ``staging`` (inside ``target``) holds into ``target``, file by file, ``marker`` last.

    A failure after the previous ``marker`` is gone is a :class:`Stranded` with no ``previous``: the
    previous save is partly replaced.
    """
    written = sorted(os.listdir(staging), key=lambda name: name == marker)
    (target / marker).unlink(missing_ok=True)  # the previous save stops being one first: a kill leaves no mix
    try:
        for entry in owned:
            if entry not in written and (target / entry).is_file():
                (target / entry).unlink()
        for entry in written:
            os.replace(staging / entry, target / entry)
    except OSError as error:
        raise Stranded(error, None) from error
    staging.rmdir()
