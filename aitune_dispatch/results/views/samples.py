"""Per-sample kernel time: one row per (function, distinct input sample) from the calls' ``sample``
links, counting kernels as ``describe_results`` does, so a fully sampled function's samples add up
to its ``time_spent_us`` (``docs/design.md``, "Samples")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ... import encoded
from ...schema import SAMPLE_COLUMNS
from ...tensors import is_tensor_like, size_text, tensor_shape, tensor_strides
from .accounting import attributed, attributed_us
from .frames import STRING_DTYPE

__all__ = ["SAMPLE_COLUMNS", "sample_table", "signature"]


_DTYPE_ABBREVIATIONS = {
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "c64",
    "complex128": "c128",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "b8",
}


def _dtype_text(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    return _DTYPE_ABBREVIATIONS.get(name, name)


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def _tensor_text(value: Any) -> str:
    shape = tensor_shape(value)
    text = f"{_dtype_text(value.dtype)}[{','.join(map(size_text, shape))}]"
    strides = tuple(int(s) for s in tensor_strides(value) or ())
    if strides and strides != _contiguous_strides(shape):
        text += "{" + ",".join(map(str, strides)) + "}"  # non-contiguous: the strides, in braces
    return text


def _value_text(value: Any) -> str:
    if is_tensor_like(value):  # a tensor or a saved TensorMeta
        return _tensor_text(value)
    if isinstance(value, (tuple, list)):
        inner = ",".join(_value_text(item) for item in value)
        if isinstance(value, tuple):
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}={_value_text(item)}" for key, item in value.items()) + "}"
    return repr(value)


def signature(sample: Any) -> str:
    """A short readable form of one ``(args, kwargs)`` sample, e.g. ``f16[2,4096,320] f16[320,320] eps=1e-05``.

    Parameters
    ----------
    sample:
        An ``(args, kwargs)`` pair from ``function_data`` (tensors or saved TensorMeta).

    Returns
    -------
    str
        Positional arguments then ``key=value`` keyword arguments, space-separated. Tensors read
        ``dtype[shape]`` with the strides in braces when they are not contiguous (``f32[4,8]{1,4}``).
    """
    if isinstance(sample, (tuple, list)) and len(sample) == 2 and isinstance(sample[1], Mapping):
        args, kwargs = sample
    else:
        args, kwargs = (sample,), {}
    parts = [_value_text(value) for value in args]
    parts += [f"{key}={_value_text(value)}" for key, value in kwargs.items()]
    return " ".join(parts)


def _call_frame(calls: pa.Table) -> pd.DataFrame:
    frame = encoded.decoded(calls.select(["call_id", "function_name", "module_id", "sample"])).to_pandas()
    return frame[frame["sample"] >= 0]


def _call_kernel_us(activity: pa.Table) -> pd.Series:
    rows = attributed(activity).select(["call_id", "kernel_us"]).to_pandas()
    return rows.groupby("call_id")["kernel_us"].sum()


def empty_samples() -> pd.DataFrame:
    """The per-sample table's columns and dtypes with no rows."""
    return pd.DataFrame(
        {
            "function_name": pd.Series([], dtype=STRING_DTYPE),
            "sample": pd.Series([], dtype=np.int64),
            "calls": pd.Series([], dtype=np.int64),
            "num_modules": pd.Series([], dtype=np.int64),
            "kernel_us": pd.Series([], dtype=float),
            "kernel_us_per_call": pd.Series([], dtype=float),
            "time_spent_pct": pd.Series([], dtype=float),
            "signature": pd.Series([], dtype=STRING_DTYPE),
        },
        columns=SAMPLE_COLUMNS,
    )


def sample_table(
    activity: pa.Table,
    calls: pa.Table,
    function_data: Mapping[str, Sequence[tuple[int, Any]]],
) -> pd.DataFrame:
    """One row per (function, sample) of ``function_data``, most kernel time first (schema: SAMPLE_COLUMNS).

    Parameters
    ----------
    activity, calls:
        The result's joined activity (schema ``ACTIVITY``) and functional calls (schema ``CALLS``).
    function_data:
        ``name -> [(count, (args, kwargs)), ...]``; every entry becomes a row, kernels or not.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SAMPLE_COLUMNS`, sorted by ``kernel_us`` (descending, stable; NaN last).
    """
    entries = [
        (name, index, int(count), sample)
        for name, items in function_data.items()
        for index, (count, sample) in enumerate(items)
    ]
    if not entries:
        return empty_samples()
    frame = pd.DataFrame(
        {
            "function_name": pd.Series([e[0] for e in entries], dtype=STRING_DTYPE),
            "sample": np.array([e[1] for e in entries], dtype=np.int64),
            "calls": np.array([e[2] for e in entries], dtype=np.int64),
            "signature": pd.Series([signature(e[3]) for e in entries], dtype=STRING_DTYPE),
        }
    )
    keys = ["function_name", "sample"]
    per_call = _call_frame(calls)
    per_call = per_call.assign(kernel_us=per_call["call_id"].map(_call_kernel_us(activity)).fillna(0.0))
    in_modules = per_call[per_call["module_id"] >= 0].drop_duplicates([*keys, "module_id"])
    found = pd.DataFrame(
        {
            "num_modules": in_modules.groupby(keys).size(),
            "kernel_us": per_call.groupby(keys)["kernel_us"].sum(),
        }
    ).reset_index()
    frame = frame.merge(found, on=keys, how="left")
    frame["num_modules"] = frame["num_modules"].fillna(0).astype(np.int64)
    frame["kernel_us"] = frame["kernel_us"].fillna(0.0).astype(float)
    kept_us = attributed_us(activity)
    frame["kernel_us_per_call"] = frame["kernel_us"] / frame["calls"].where(frame["calls"] > 0)
    frame["time_spent_pct"] = frame["kernel_us"] / kept_us * 100.0 if kept_us > 0 else 0.0
    frame = frame.sort_values("kernel_us", ascending=False, kind="stable", na_position="last")
    return frame[SAMPLE_COLUMNS].reset_index(drop=True)
