"""The Jinja2 environment of the HTML report: its templates are files in ``reports/templates/``.

The layout lives in the templates and the analysis in Python (the views and the formatting helpers of
:mod:`.html`), which hands each template plain values. Jinja2 (a dependency of torch) is imported on
first render, never by ``import aitune_dispatch``. Autoescaping is on, so every name, path and value
written with ``{{ }}`` reaches the page as text; ``finalize`` escapes with :func:`html.escape`
(quotes as ``&quot;``), the escaping the page used before it had templates. Every template sees the
formatting helpers below as globals.
"""

from __future__ import annotations

import functools
import html
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pandas import NA

if TYPE_CHECKING:
    import jinja2

from .base import human_time, short_kernel_name

TEMPLATES = Path(__file__).with_name("templates")
BREAK_AFTER = (".", "_", "::", ", ", "<")  # where a long name may wrap
BREAK_CHARS = 24  # names longer than this may wrap inside table cells at any window width
NO_VALUE = "\u2014"


def missing(value: Any) -> bool:
    """True for None, NaN and pandas' missing value: the cells shown as ``—``.

    Parameters
    ----------
    value:
        A cell's value.

    Returns
    -------
    bool
        Whether the value is missing.
    """
    if value is None or value is NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def number(value: Any, digits: int = 1) -> str:
    """``value`` with thousands separators and ``digits`` decimals (``—`` where missing).

    Parameters
    ----------
    value:
        A number.
    digits:
        Decimals; 0 rounds to a whole number.

    Returns
    -------
    str
        ``1,234.5``.
    """
    if missing(value):
        return NO_VALUE
    return f"{int(round(float(value))):,}" if digits == 0 else f"{float(value):,.{digits}f}"


def name_parts(value: Any) -> list[str]:
    """``value`` as text cut after each of ``BREAK_AFTER``: the pieces a template joins with ``<wbr>``.

    Parameters
    ----------
    value:
        A module path, op, function or kernel name.

    Returns
    -------
    list of str
        The pieces, in order; joined they are ``str(value)``.
    """
    text, parts, start, pos = str(value), [], 0, 0
    while pos < len(text):
        mark = next((m for m in BREAK_AFTER if text.startswith(m, pos)), None)
        if mark is None:
            pos += 1
            continue
        pos += len(mark)
        parts.append(text[start:pos])
        start = pos
    if start < len(text) or not parts:
        parts.append(text[start:])
    return parts


def _finalize(value: Any) -> Any:
    if hasattr(value, "__html__"):  # markup a macro or the caller made already
        return value
    from markupsafe import Markup

    return Markup(html.escape(str(value), quote=True))


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The report's environment (made once): templates from ``TEMPLATES``, autoescaping, strict undefined.

    Returns
    -------
    jinja2.Environment
        Loads ``*.html.j2`` from the package's ``reports/templates`` folder.
    """
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.globals.update(
        name_parts=name_parts,
        missing=missing,
        number=number,
        short_kernel_name=short_kernel_name,
        human_time=human_time,
        NO_VALUE=NO_VALUE,
        BREAK_CHARS=BREAK_CHARS,
    )
    env.filters["thousands"] = lambda value: f"{int(value):,}"
    return env


def render(template: str, **context: Any) -> str:
    """``template`` (a file in ``TEMPLATES``) rendered with ``context``.

    Parameters
    ----------
    template:
        The template's file name, ``kernels.html.j2``.
    **context:
        The values it reads.

    Returns
    -------
    str
        The HTML.
    """
    return environment().get_template(template).render(**context)


def markup(text: str) -> Any:
    """``text`` (HTML made by another template) marked safe, so a template writes it as it is.

    Parameters
    ----------
    text:
        HTML rendered by :func:`render`.

    Returns
    -------
    markupsafe.Markup
        The same text, not escaped again.
    """
    from markupsafe import Markup

    return Markup(text)
