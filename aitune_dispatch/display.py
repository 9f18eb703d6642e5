"""How a result shows in a notebook, without the results stage importing the reports stage.

``ProfileResult._repr_html_`` asks :func:`notebook_html`; what draws it is set with
:func:`set_notebook_renderer`. The package root (``aitune_dispatch/__init__.py``, above every
stage) points it at ``reports.html.notebook_html``, imported on first use, so results stay below
reports and ``import aitune_dispatch`` stays light. Imports nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_renderer: Callable[[Any], str] | None = None


def set_notebook_renderer(renderer: Callable[[Any], str]) -> None:
    """Draw results in notebooks with ``renderer`` (a result -> an HTML fragment).

    Parameters
    ----------
    renderer:
        Called with the result each time Jupyter shows one.

    Returns
    -------
    None
    """
    global _renderer
    _renderer = renderer


def notebook_html(result: Any) -> str:
    """The HTML fragment a notebook shows for ``result``.

    Parameters
    ----------
    result:
        A ``ProfileResult``.

    Returns
    -------
    str
        The fragment the registered renderer draws.

    Raises
    ------
    RuntimeError
        No renderer is registered (the package root registers one on import).
    """
    if _renderer is None:
        raise RuntimeError("no notebook renderer is registered; import aitune_dispatch to register the HTML one")
    return _renderer(result)
