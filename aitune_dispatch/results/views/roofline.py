"""How far each sampled call is from what the GPU can do: achieved FLOP/s and bytes/s against the
device's limits, the roofline position, and the time the limits say could be saved.

Per (function, sample): the calls' FLOPs and bytes (``results/work.py``: torch's formulas on meta
tensors; bytes a lower bound) over the kernel time measured for them. The attainable rate is
``min(peak FLOP/s, intensity x bandwidth)`` (the roofline); a call reaches ``fraction_of_bound`` of
it, and ``worth_us = kernel_us x (1 - fraction_of_bound)`` ranks what is worth optimizing: a fast
call that is far from its bound can gain more than a slow one already at it. Where a call's FLOPs
are unknown (no formula) the fraction is its bytes/s over the bandwidth, a lower bound of the true
fraction whichever roof applies. Limits come from ``results/limits.py`` by the recorded GPU name;
an unknown device (or the CPU source) leaves every fraction NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ... import schema
from ...schema import ROOFLINE_COLUMNS
from ..limits import DeviceLimits, limits_for, peak_flops
from .frames import STRING_DTYPE
from .top import check_top, first_rows

WORTH_COLUMNS = ["function_name", "sample", "signature", "calls", "kernel_us", "bound", "fraction_of_bound", "worth_us"]


def device_limits(metadata: Mapping[str, str]) -> DeviceLimits | None:
    """The limits of the GPU a run recorded.

    Parameters
    ----------
    metadata:
        A result's metadata (its device and GPU name).

    Returns
    -------
    DeviceLimits or None
        None for the CPU source or a GPU ``results/limits.py`` does not know.
    """
    return limits_for(metadata.get(schema.META_GPU_NAME))  # a CPU run records no GPU name


def _rates(samples: pd.DataFrame, work: Mapping[tuple[str, int], Any], metadata: Mapping[str, str]) -> pd.DataFrame:
    limits = device_limits(metadata)
    tf32 = metadata.get(schema.META_ALLOW_TF32) == "True"
    keys = list(zip(samples["function_name"], samples["sample"]))
    found = [work.get((name, int(index))) for name, index in keys]
    calls = samples["calls"].to_numpy(dtype=np.float64)
    per_call_flops = np.array([np.nan if w is None or w.flops is None else float(w.flops) for w in found])
    per_call_bytes = np.array([np.nan if w is None or w.min_bytes is None else float(w.min_bytes) for w in found])
    seconds = samples["kernel_us"].to_numpy(dtype=np.float64) / 1e6
    seconds = np.where(seconds > 0, seconds, np.nan)
    frame = pd.DataFrame(index=samples.index)
    frame["flops"] = per_call_flops * calls
    frame["min_bytes"] = per_call_bytes * calls
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["intensity"] = frame["flops"] / frame["min_bytes"].where(frame["min_bytes"] > 0)
        frame["flop_per_s"] = frame["flops"] / seconds
        frame["bytes_per_s"] = frame["min_bytes"] / seconds
    frame["dtype"] = pd.Series([None if w is None else w.dtype for w in found], index=frame.index, dtype=object)
    peaks = [peak_flops(limits, None if w is None else w.dtype, tf32) for w in found]
    frame["peak_flop_per_s"] = np.array([np.nan if p is None else p for p in peaks], dtype=np.float64)
    frame["peak_bytes_per_s"] = float(limits.bandwidth) if limits is not None else np.nan
    ridge = frame["peak_flop_per_s"] / frame["peak_bytes_per_s"]
    known = frame["intensity"].notna() & ridge.notna()
    bound = np.where(frame["intensity"] >= ridge, "compute", "memory")
    frame["bound"] = pd.Series(np.where(known, bound, None), index=frame.index, dtype=object)
    attainable = np.minimum(frame["peak_flop_per_s"], frame["intensity"] * frame["peak_bytes_per_s"])
    by_flops = frame["flop_per_s"] / attainable
    by_bytes = frame["bytes_per_s"] / frame["peak_bytes_per_s"]
    frame["fraction_of_bound"] = by_flops.where(known, by_bytes)
    frame["worth_us"] = samples["kernel_us"] * (1.0 - frame["fraction_of_bound"].clip(upper=1.0))
    frame = frame.astype({"bound": STRING_DTYPE, "dtype": STRING_DTYPE})
    return frame[ROOFLINE_COLUMNS]


def roofline_samples(
    samples: pd.DataFrame, work: Mapping[tuple[str, int], Any], metadata: Mapping[str, str]
) -> pd.DataFrame:
    """``samples`` (the ``samples()`` frame) with :data:`ROOFLINE_COLUMNS` after its own.

    Parameters
    ----------
    samples:
        One row per (function, sample), ``schema.SAMPLE_COLUMNS``.
    work:
        ``(function_name, sample) -> Work`` (``results.work.sample_work``); a missing key is unknown work.
    metadata:
        The run's metadata: the GPU's name and whether float32 matmuls used TF32.

    Returns
    -------
    pandas.DataFrame
        ``SAMPLE_COLUMNS + ROOFLINE_COLUMNS``.
    """
    return pd.concat([samples, _rates(samples, work, metadata)], axis=1)


def roofline_functions(summary: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """``summary`` (the ``describe()`` frame) with :data:`ROOFLINE_COLUMNS` per function, over its samples.

    A function's FLOPs and bytes are its samples' sums (NaN where any sample's is unknown), its rates
    those over its sampled kernel time; ``fraction_of_bound`` is ``1 - worth_us / that time`` (the
    samples' fractions weighted by their time) and ``bound`` the samples' common one, or ``mixed``.
    A function without samples has NaN throughout.

    Parameters
    ----------
    summary:
        ``schema.SUMMARY_COLUMNS``.
    samples:
        :func:`roofline_samples`' frame of the same result.

    Returns
    -------
    pandas.DataFrame
        ``SUMMARY_COLUMNS + ROOFLINE_COLUMNS``.
    """
    rows = []
    for name in summary["function_name"]:
        own = samples[samples["function_name"] == name]
        rows.append(_function_row(own))
    extra = pd.DataFrame(rows, columns=ROOFLINE_COLUMNS, index=summary.index)
    extra = extra.astype({c: np.float64 for c in ROOFLINE_COLUMNS if c not in ("bound", "dtype")})
    extra = extra.astype({"bound": STRING_DTYPE, "dtype": STRING_DTYPE})
    return pd.concat([summary, extra], axis=1)


def _sum_or_nan(values: pd.Series) -> float:
    return float(values.sum()) if len(values) and values.notna().all() else np.nan


def _one_or_nan(values: pd.Series) -> float:
    unique = values.dropna().unique()
    return float(unique[0]) if len(unique) == 1 and values.notna().all() else np.nan


def _one_or_none(values: pd.Series) -> str | None:
    unique = values.dropna().unique()
    return str(unique[0]) if len(unique) == 1 else None


def _function_row(own: pd.DataFrame) -> dict[str, Any]:
    seconds = float(own["kernel_us"].sum()) / 1e6 if len(own) else 0.0
    flops, min_bytes = _sum_or_nan(own["flops"]), _sum_or_nan(own["min_bytes"])
    bounds = set(own["bound"].dropna())
    worth = _sum_or_nan(own["worth_us"])
    return {
        "flops": flops,
        "min_bytes": min_bytes,
        "intensity": flops / min_bytes if min_bytes and min_bytes > 0 else np.nan,
        "flop_per_s": flops / seconds if seconds > 0 else np.nan,
        "bytes_per_s": min_bytes / seconds if seconds > 0 else np.nan,
        "dtype": _one_or_none(own["dtype"]),
        "peak_flop_per_s": _one_or_nan(own["peak_flop_per_s"]),
        "peak_bytes_per_s": _one_or_nan(own["peak_bytes_per_s"]),
        "bound": None if not bounds or own["bound"].isna().any() else (bounds.pop() if len(bounds) == 1 else "mixed"),
        "fraction_of_bound": 1.0 - worth / (seconds * 1e6) if seconds > 0 and not np.isnan(worth) else np.nan,
        "worth_us": worth,
    }


def worth_optimizing(samples: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """The samples ranked by ``worth_us``, the time their bound says could be saved, largest first.

    Parameters
    ----------
    samples:
        :func:`roofline_samples`' frame.
    top:
        Keep the first ``top`` rows (a positive integer); None keeps all.

    Returns
    -------
    pandas.DataFrame
        :data:`WORTH_COLUMNS`; rows whose worth is unknown (no limits, no work) are left out.

    Raises
    ------
    ValueError
        ``top`` is neither None nor a positive integer.
    """
    top = check_top(top)
    known = samples[samples["worth_us"].notna()]
    table = known.sort_values(["worth_us", "kernel_us"], ascending=False, kind="stable")[WORTH_COLUMNS]
    table = table.reset_index(drop=True)
    return first_rows(table, top)


MODULE_ROOFLINE_COLUMNS = [
    "module",  # the module pattern (layer pattern, name or "<Type> (root)") the calls ran directly in
    "calls",  # sampled functional calls made directly in those modules
    "kernel_us",  # their attributed kernel time
    "flops",  # their FLOPs; NaN where any of them has unknown FLOPs
    "min_bytes",
    "flop_per_s",
    "bytes_per_s",
    "fraction_of_bound",  # 1 - worth_us / kernel_us: the calls' fractions weighted by their time
    "worth_us",  # the calls' time the limits say could be saved
]


def roofline_modules(result: Any, samples: pd.DataFrame) -> pd.DataFrame:
    """The sampled calls' roofline per module pattern they ran directly in, most ``worth_us`` first.

    Each call counts its sample's work per call and its own kernel time, and the time it could save
    at its sample's ``fraction_of_bound``.

    Parameters
    ----------
    result:
        The result the samples come from (its calls, activity and modules).
    samples:
        :func:`roofline_samples`' frame of that result.

    Returns
    -------
    pandas.DataFrame
        :data:`MODULE_ROOFLINE_COLUMNS`; calls without a sample link or outside the hierarchy are left out.
    """
    from ... import encoded
    from .accounting import attributed
    from .modules import modules_frame, pattern_labels

    empty = pd.DataFrame(
        {c: pd.Series([], dtype=STRING_DTYPE if c == "module" else np.float64) for c in MODULE_ROOFLINE_COLUMNS}
    ).astype({"calls": np.int64})
    if result.calls.num_rows == 0 or result.modules.num_rows == 0:
        return empty
    calls = encoded.decoded(result.calls.select(["call_id", "function_name", "module_id", "sample"])).to_pandas()
    calls = calls[(calls["sample"] >= 0) & (calls["module_id"] >= 0)]
    if calls.empty:
        return empty
    kernel = (
        attributed(result.activity).select(["call_id", "kernel_us"]).to_pandas().groupby("call_id")["kernel_us"].sum()
    )
    per_sample = samples.set_index(["function_name", "sample"])
    per_call = per_sample[["flops", "min_bytes"]].div(per_sample["calls"].where(per_sample["calls"] > 0), axis=0)
    keys = pd.MultiIndex.from_arrays([calls["function_name"].astype(object), calls["sample"].astype(np.int64)])
    frame = pd.DataFrame(
        {
            "module": calls["module_id"].map(pattern_labels(modules_frame(result))).to_numpy(),
            "kernel_us": calls["call_id"].map(kernel).fillna(0.0).to_numpy(),
            "flops": per_call["flops"].reindex(keys).to_numpy(),
            "min_bytes": per_call["min_bytes"].reindex(keys).to_numpy(),
            "fraction": per_sample["fraction_of_bound"].reindex(keys).to_numpy(),
        }
    )
    frame["worth_us"] = frame["kernel_us"] * (1.0 - frame["fraction"].clip(upper=1.0))
    grouped = frame.groupby("module", sort=False)
    table = pd.DataFrame(
        {
            "calls": grouped.size().astype(np.int64),
            "kernel_us": grouped["kernel_us"].sum(),
            **{column: grouped[column].agg(_sum_or_nan) for column in ("flops", "min_bytes", "worth_us")},
        }
    )
    seconds = (table["kernel_us"] / 1e6).where(table["kernel_us"] > 0)
    table["flop_per_s"] = table["flops"] / seconds
    table["bytes_per_s"] = table["min_bytes"] / seconds
    table["fraction_of_bound"] = 1.0 - table["worth_us"] / table["kernel_us"].where(table["kernel_us"] > 0)
    table = table.rename_axis("module").reset_index()
    table["module"] = table["module"].astype(STRING_DTYPE)
    table = table.sort_values(["worth_us", "kernel_us"], ascending=False, kind="stable", na_position="last")
    return table[MODULE_ROOFLINE_COLUMNS].reset_index(drop=True)
