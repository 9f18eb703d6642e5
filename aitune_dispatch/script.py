"""``run_script()``: a Python script run as ``__main__`` inside a ``recording()`` without a module (every
outermost module call a root), as ``python -m aitune_dispatch run script.py`` runs it."""

from __future__ import annotations

import runpy
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .region import recording
from .results import ProfileResult


class ScriptError(Exception):
    """The script raised, or exited with a non-zero status; ``__cause__`` is what it raised."""


@contextmanager
def as_main(path: Path, args: Sequence[str]) -> Iterator[None]:
    """``sys.argv`` the script and its arguments and ``sys.path[0]`` its folder, as ``python script.py``
    sets them; both lists are put back as they were afterwards (the same objects, their old contents)."""
    argv, search_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    folder = str(path.resolve().parent)
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.append(folder)
    try:
        yield
    finally:
        sys.argv = argv
        sys.path[:] = search_path


def parse_steps(text: str) -> tuple[int, int]:
    """``"A:B"`` as ``(A, B)``: the steps ``A .. B-1`` are recorded (``0 <= A < B``).

    Parameters
    ----------
    text:
        Two integers joined by ``:`` (``10:20``).

    Returns
    -------
    tuple of int
        ``(A, B)``.

    Raises
    ------
    ValueError
        ``text`` is not of that form; the message gives an example.
    """
    first, colon, last = text.partition(":")
    try:
        a, b = int(first), int(last)
    except ValueError:
        a = b = -1
    if not colon or a < 0 or b <= a:
        raise ValueError(f"steps are A:B with 0 <= A < B (10:20 records steps 10 to 19); got {text!r}")
    return a, b


def run_script(
    path: str | Path, args: Sequence[str] = (), *, steps: tuple[int, int] | None = None, **options: Any
) -> ProfileResult:
    """Run the script at ``path`` as ``__main__`` (``runpy``, with ``sys.argv = [path, *args]`` and
    ``sys.path[0]`` its folder, both restored after) inside ``aitune_dispatch.recording()`` without a
    module, so every outermost module call is a root of the hierarchy.

    The script's ``sys.exit(0)`` (or ``sys.exit()``) ends it normally; it calls
    ``aitune_dispatch.step()`` at the end of each step for ``steps`` to pick steps.

    Parameters
    ----------
    path:
        The script.
    args:
        Its command-line arguments (``sys.argv[1:]`` inside it).
    steps:
        ``(A, B)``: record steps ``A .. B-1`` (the schedule ``wait=A, active=B-A``); None: the whole
        script is one step.
    **options:
        ``recording()``'s options (``device``, ``function_names``, ``functions``, ``op_tracer``, ...).

    Returns
    -------
    ProfileResult
        The recorded steps.

    Raises
    ------
    FileNotFoundError
        ``path`` is not a file.
    ScriptError
        The script raised or exited non-zero; nothing of the recording stays installed.
    RuntimeError
        The script ended before step ``A`` (the message says how many steps ran), or the recording was
        refused (another one runs, torch.profiler collects).
    """
    script = Path(path)
    if not script.is_file():
        raise FileNotFoundError(f"{script} is not a file; pass the path of a Python script to run")
    wait, active = (0, None) if steps is None else (steps[0], steps[1] - steps[0])
    rec = recording(wait=wait, active=active, **options)
    with as_main(script, args), rec:
        _run(script)
    return rec.result


def _run(script: Path) -> None:
    """The script as ``__main__``; its ``sys.exit(0)`` returns, its error or non-zero exit is a ScriptError
    (the recording's own errors, raised before or after it runs, are not)."""
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise ScriptError(f"{script} exited with status {exit_.code}") from exit_
    except Exception as error:
        raise ScriptError(f"{script} raised {type(error).__name__}: {error}") from error
