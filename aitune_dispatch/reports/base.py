"""What every renderer shares: the ``Renderer`` base, short kernel names and time units.

A renderer is a pure function of a result (no torch import) that lays out what
:mod:`aitune_dispatch.results.views` computes, one format per file, declaring its extension so a caller
picks one by the output's name (as pyinstrument's renderers do); ``docs/design.md``, "Layout".
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from .. import schema
from ..results import atomic

if TYPE_CHECKING:
    from ..results import ProfileResult

__all__ = ["Renderer", "TimeUnit", "human_time", "kernel_labels", "short_kernel_name", "time_unit"]


class Renderer(ABC):
    """Turns a result into the text of one file format; :meth:`check_path` refuses other endings before work is done.

    Attributes
    ----------
    extension:
        The ending of the files this renderer writes (``.html``).
    extensions:
        Every ending it accepts, ``extension`` first (``(".json", ".json.gz")``); empty: only ``extension``.
    default_name:
        The file's name in an output folder (the CLI's ``--out DIR``: ``report.html``); None: an
        output folder holds no file of this format.
    """

    extension: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]] = ()
    default_name: ClassVar[str | None] = None

    @classmethod
    def accepted(cls) -> tuple[str, ...]:
        """Every file ending this renderer writes, ``extension`` first.

        Returns
        -------
        tuple of str
            ``extensions``, or ``(extension,)`` where it is empty.
        """
        return cls.extensions or (cls.extension,)

    @classmethod
    def check_path(cls, path: str | Path) -> Path:
        """``path`` as a Path, after checking that it names a file of this format.

        Parameters
        ----------
        path:
            The output file.

        Returns
        -------
        pathlib.Path
            The same path.

        Raises
        ------
        IsADirectoryError
            ``path`` is an existing folder.
        ValueError
            ``path`` does not end in one of :meth:`accepted`.
        """
        target = Path(path)
        if target.is_dir():
            example = target / f"report{cls.extension}"
            raise IsADirectoryError(f"{target} is a folder; pass a file name such as {example}")
        if not target.name.lower().endswith(cls.accepted()):
            endings = " or ".join(cls.accepted())
            raise ValueError(f"{target} does not end in {endings}; name the output e.g. report{cls.extension}")
        return target

    @abstractmethod
    def render(self, result: ProfileResult) -> str:
        """The whole file's text.

        Parameters
        ----------
        result:
            The result to render.

        Returns
        -------
        str
            The file's text, before :meth:`encode`.
        """

    def write(self, result: ProfileResult, path: str | Path) -> Path:
        """Render ``result`` into ``path`` (parent folders are created) and return the path.

        The file is written beside ``path`` and put there only when complete, as a result is saved
        (``results.atomic.write_bytes``): a failed write leaves the previous file as it was.

        Parameters
        ----------
        result:
            The result to render.
        path:
            The output file; its ending must be one of :meth:`accepted`. A symlink is followed.

        Returns
        -------
        pathlib.Path
            The path written.

        Raises
        ------
        OSError
            The disk refused (a full disk: ``ENOSPC``); the message names ``path`` and what was kept.
        """
        target = self.check_path(path)
        return atomic.write_bytes(target, self.encode(self.render(result), target))

    def encode(self, text: str, path: Path) -> bytes:
        """The bytes written for ``text`` at ``path`` (UTF-8; a renderer may compress).

        Parameters
        ----------
        text:
            What :meth:`render` returned.
        path:
            The output file (its name may ask for compression, ``.gz``).

        Returns
        -------
        bytes
            The file's content.
        """
        return text.encode("utf-8")


# -- kernel names ------------------------------------------------------------------------------------
_PARENS = re.compile(r"\([^()]*\)")
_LAMBDAS = re.compile(r"(?:::)?\{lambda#?\d*\}|::operator(?:\(\))?|\bconst\b|&")
_NAMESPACE = re.compile(r"\b[A-Za-z_]\w*::")
KERNEL_NAME_CHARS = 80


def _cut_parameters(text: str) -> str:
    """``name<T>(int, float*)`` -> ``name<T>``: everything from the first top-level ``(``."""
    depth = 0
    for pos, char in enumerate(text):
        if char in "<[{":
            depth += 1
        elif char in ">]}":
            depth -= 1
        elif char == "(" and depth == 0 and pos > 0 and text[pos - 1] != " ":
            return text[:pos]
    return text


def _collapse_templates(text: str, keep_depth: int) -> str:
    """Template arguments nested deeper than ``keep_depth`` become ``…``."""
    out, depth = [], 0
    for char in text:
        if char == "<":
            depth += 1
            if depth == keep_depth + 1:
                out.append("<\u2026")
            if depth > keep_depth:
                continue
        elif char == ">":
            depth -= 1
            if depth >= keep_depth:
                if depth == keep_depth:
                    out.append(">")
                continue
        elif depth > keep_depth:
            continue
        out.append(char)
    return "".join(out)


def short_kernel_name(name: str, limit: int = KERNEL_NAME_CHARS) -> str:
    """A demangled C++ kernel name cut to what tells kernels apart, at most ``limit`` characters.

    Return type, parameter lists, namespaces and lambdas go, then (while too long) the deepest template
    arguments, then the end (``…``): ``elementwise_kernel<128, 2, gpu_kernel_impl_nocast<…>>``. Names that
    are not C++ (``Memset (Device)``, ``cpu::aten::addmm``) are only cut to ``limit``.
    """
    text = " ".join(name.split())
    if not text.startswith((schema.CPU_KERNEL_PREFIX, "Memcpy", "Memset")):
        text = _cut_parameters(text.replace("(anonymous namespace)::", "").removeprefix("void "))
        while (shorter := _PARENS.sub("", text)) != text:
            text = shorter
        text = _NAMESPACE.sub("", _LAMBDAS.sub("", text))
        text = " ".join(text.split()).replace(" >", ">").replace(" ,", ",")
        for depth in (3, 2):
            if len(text) > limit:
                text = _collapse_templates(text, depth)
    return text if len(text) <= limit else text[: max(limit - 1, 1)].rstrip("\u2026 ") + "\u2026"


def kernel_labels(
    kernels: Sequence[object], short_names: Sequence[object], limit: int = KERNEL_NAME_CHARS
) -> list[str]:
    """What a table shows for each kernel: its short name (the views' ``short_name`` column), or, where
    different kernels of ``kernels`` share that short name (``elementwise_kernel`` for an add and a copy),
    :func:`short_kernel_name` of each of them, which starts with it and keeps the template arguments
    that tell them apart.

    Parameters
    ----------
    kernels:
        Full kernel names, one per row; a missing one (None, NaN) reads as ``""``.
    short_names:
        Their short names (``results.views.short_names``), in the same order; a missing one is its
        kernel's full name.
    limit:
        The most characters of a name that keeps its template arguments.

    Returns
    -------
    list of str
        One label per row.

    Raises
    ------
    ValueError
        ``kernels`` and ``short_names`` differ in length.
    """
    if len(kernels) != len(short_names):
        raise ValueError(
            f"kernel_labels needs one short name per kernel; got {len(kernels)} kernels and {len(short_names)} "
            "short names (pass the short_name column of the same rows)"
        )
    fulls = [kernel if isinstance(kernel, str) else "" for kernel in kernels]
    shorts = [short if isinstance(short, str) else full for short, full in zip(short_names, fulls)]
    owners: dict[str, set[str]] = {}
    for full, short in zip(fulls, shorts):
        owners.setdefault(short, set()).add(full)
    return [short if len(owners[short]) == 1 else short_kernel_name(full, limit) for full, short in zip(fulls, shorts)]


# -- time units ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimeUnit:
    """One unit for a whole report: ``scale`` microseconds per unit and its symbol."""

    symbol: str
    scale: float

    def __call__(self, us: float, digits: int = 1) -> str:
        """``us`` in this unit with thousands separators, no symbol."""
        return f"{us / self.scale:,.{digits}f}"

    def decimals(self, us: float) -> int:
        """Decimals for ``us``: 1 in µs; in ms and s 2, more below 0.1 so 40 µs in ms reads ``0.040`` (at most 6)."""
        if self.scale == 1.0:
            return 1
        value = float(f"{abs(us) / self.scale:.2g}")  # as shown: 9.96 µs in ms is 0.010, not 0.0100
        if value == 0 or value != value or value >= 0.1:
            return 2
        return min(1 - math.floor(math.log10(value)), 6)


def time_unit(largest_us: float) -> TimeUnit:
    """s, ms or µs: the unit in which ``largest_us`` reads with 1-3 digits before the point (or more)."""
    if largest_us >= 1e6:
        return TimeUnit("s", 1e6)
    if largest_us >= 1e3:
        return TimeUnit("ms", 1e3)
    return TimeUnit("\u00b5s", 1.0)


def human_time(us: float) -> str:
    """A duration given in microseconds as ``812.4 µs``, ``12.35 ms`` or ``3.50 s``."""
    if us != us:  # NaN
        return "n/a"
    unit = time_unit(abs(us))
    return f"{us / unit.scale:,.{1 if unit.scale == 1.0 else 2}f} {unit.symbol}"
