"""The one rule for every row limit of the API and the CLI (``top``, ``top_k``, ``--top``): None keeps
every row, a positive integer keeps that many, anything else is a ValueError naming the argument.

One rule, because ``frame.head(-1)`` and ``rows[:-1]`` silently drop the last row and ``head(True)``
keeps one: a limit that is not a count of rows must not be read as a slice.
"""

from __future__ import annotations

import numbers

import pandas as pd

__all__ = ["check_top", "first_rows"]


def check_top(value: object, name: str = "top") -> int | None:
    """``value`` as a row limit: None (every row) or a positive integer, returned as an ``int``.

    Parameters
    ----------
    value:
        The limit a caller passed.
    name:
        The argument's name, for the error (``"top"``, ``"top_k"``).

    Returns
    -------
    int or None

    Raises
    ------
    ValueError
        ``value`` is 0, negative, a bool, or not an integer.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be None (every row) or a positive integer, got {value!r}")
    return int(value)


def first_rows(frame: pd.DataFrame, top: int | None) -> pd.DataFrame:
    """The first ``top`` rows of ``frame``, every row for None.

    Parameters
    ----------
    frame:
        A table, in the order its rows are ranked.
    top:
        A limit :func:`check_top` accepted.

    Returns
    -------
    pandas.DataFrame
        ``frame`` itself for None, else its head.
    """
    return frame if top is None else frame.head(top)
