"""Reports: a finished result as a Perfetto (Chrome trace) timeline, a self-contained HTML page or text.

``RENDERERS`` registers the file formats and the CLI writes every file through :func:`renderer_for`, so a
format added here is one the CLI writes (``docs/design.md``, "Layout"); the comparison page of two results
(:class:`ComparisonRenderer`, ``write_comparison``) is not one of them: ``compare --html`` writes it. No torch
import.
"""

from __future__ import annotations

from pathlib import Path

from .base import Renderer
from .comparison import ComparisonRenderer, write_comparison
from .html import HtmlRenderer, write_report
from .perfetto import GPU_CLOCK_OFFSET_KEY, PerfettoRenderer, perfetto_events, write_perfetto
from .text import TextRenderer

RENDERERS: tuple[type[Renderer], ...] = (HtmlRenderer, PerfettoRenderer)


def renderer_for(path: str | Path) -> Renderer:
    """The renderer for an output file's name.

    Parameters
    ----------
    path:
        The output file: ``.html`` / ``.htm`` (HTML report), ``.json`` / ``.json.gz`` (trace).

    Returns
    -------
    Renderer
        A renderer with its default options.

    Raises
    ------
    ValueError
        No renderer writes files with that ending; the message lists the endings that work.
    """
    name = Path(path).name.lower()
    for renderer in RENDERERS:
        if name.endswith(renderer.accepted()):
            return renderer()
    known = ", ".join(ending for r in RENDERERS for ending in r.accepted())
    suffix = "".join(Path(path).suffixes) or "files without an extension"
    raise ValueError(f"no report format writes {suffix!r}; name the output {known}")


__all__ = [
    "GPU_CLOCK_OFFSET_KEY",
    "ComparisonRenderer",
    "HtmlRenderer",
    "PerfettoRenderer",
    "Renderer",
    "TextRenderer",
    "perfetto_events",
    "renderer_for",
    "write_comparison",
    "write_perfetto",
    "write_report",
]
