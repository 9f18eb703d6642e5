"""How a result shows in a notebook without the results stage importing reports (``docs/design.md``, "Layout").

``ProfileResult._repr_html_`` asks :func:`notebook_html`; the package root registers
``reports.html.notebook_html``, imported on first use, so ``import aitune_dispatch`` stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_renderer: Callable[[Any], str] | None = None


def set_notebook_renderer(renderer: Callable[[Any], str]) -> None:
    """Draw results in notebooks with ``renderer`` (a result -> an HTML fragment)."""
    global _renderer
    _renderer = renderer


def notebook_html(result: Any) -> str:
    """The HTML fragment a notebook shows for ``result``, drawn by the registered renderer."""
    if _renderer is None:
        raise RuntimeError("no notebook renderer is registered; import aitune_dispatch to register the HTML one")
    return _renderer(result)
