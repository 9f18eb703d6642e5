"""Reports: a finished result as a Perfetto (Chrome trace) timeline or a self-contained HTML page.

One renderer per file (``perfetto.py``, ``html.py``), all from ``base.Renderer``, each declaring the
file extension it writes; :func:`renderer_for` picks one by an output file's name. No torch import.
"""

from __future__ import annotations

from pathlib import Path

from .base import Renderer
from .html import HtmlRenderer, write_report
from .perfetto import GPU_CLOCK_OFFSET_KEY, PerfettoRenderer, perfetto_events, write_perfetto

RENDERERS: tuple[type[Renderer], ...] = (HtmlRenderer, PerfettoRenderer)


def renderer_for(path: str | Path) -> Renderer:
    """The renderer whose extension ``path`` ends with (``.html`` or ``.json``)."""
    suffix = Path(path).suffix.lower()
    for renderer in RENDERERS:
        if suffix == renderer.extension or (suffix == ".htm" and renderer is HtmlRenderer):
            return renderer()
    known = ", ".join(r.extension for r in RENDERERS)
    raise ValueError(f"no report format writes {suffix or 'files without an extension'!r}; name the output {known}")


__all__ = [
    "GPU_CLOCK_OFFSET_KEY",
    "HtmlRenderer",
    "PerfettoRenderer",
    "Renderer",
    "perfetto_events",
    "renderer_for",
    "write_perfetto",
    "write_report",
]
