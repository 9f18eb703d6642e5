"""The dtypes every DataFrame a result returns shares: one string dtype, integer counts.

pandas 3 infers ``str`` for a column of Python strings and pandas 2 ``object``; ``profiling_df()``
and ``to_pandas()`` get that dtype from Arrow, so the views convert to it too, and a frame read
beside another never mixes ``str`` and ``object`` for the same kind of column. A missing string is
what that dtype holds for missing (NaN under ``str``, None under ``object``): test with
``pandas.isna`` or ``isinstance(value, str)``, not ``is None``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ... import encoded

STRING_DTYPE = pd.Series(["a"]).dtype  # what pandas infers for Python strings: "str" from pandas 3, else object


def string_array(column: pa.ChunkedArray | pa.Array) -> Any:
    """An Arrow string (or dictionary-encoded string) column as a pandas array of ``STRING_DTYPE``,
    with no per-row Python work where pandas has an Arrow-backed string dtype."""
    if isinstance(STRING_DTYPE, pd.StringDtype):
        return pd.array(encoded.plain(column, pa.large_string()), dtype=STRING_DTYPE)
    return encoded.objects(column)


def with_strings(frame: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """``frame`` with ``columns`` (of Python strings and missing values) in ``STRING_DTYPE``."""
    return frame.astype({column: STRING_DTYPE for column in columns}) if len(frame.columns) else frame


def empty_frame(columns: Iterable[str], dtypes: Mapping[str, Any], strings: Iterable[str] = ()) -> pd.DataFrame:
    """No rows, ``columns`` in order: ``dtypes`` where named, ``STRING_DTYPE`` for ``strings``,
    float64 otherwise (a time or a share)."""
    kinds = dict(dtypes) | {column: STRING_DTYPE for column in strings}
    return pd.DataFrame({c: pd.Series([], dtype=kinds.get(c, np.float64)) for c in columns})
