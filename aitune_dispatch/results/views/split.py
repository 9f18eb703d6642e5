"""``describe(by="device" | "rank")``: the spec's summary once per GPU device or per rank, each part
exactly ``describe_results`` of that part alone, so its shares add up to 100 (``docs/design.md``,
"Samples"). It reads a :class:`SplitResult`, never importing ``ProfileResult``, which imports it."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from ... import encoded, schema
from ...config import SPLITS, one_of
from ...schema import FunctionData
from ..values import iter_tensor_likes
from .ranks import RankedResult, result_ranks, select_rank
from .summary import describe_results, empty_summary
from .top import check_top


class SplitResult(RankedResult, Protocol):
    """What :func:`describe_by` reads of a ``ProfileResult``: a ranked result that describes itself."""

    def attributed(self) -> pa.Table: ...
    def describe(self, top_k: int | None = 10) -> pd.DataFrame: ...


def sample_device(sample: Any) -> int | None:
    """The device ordinal of a sample's first tensor: ``cuda:1`` -> 1, ``cpu`` -> -1, None without tensors."""
    for tensor in iter_tensor_likes(sample):
        device = str(getattr(tensor, "device", ""))
        if device == "cpu":
            return schema.CPU_STREAM
        kind, _, index = device.partition(":")
        if kind == "cuda":
            return int(index) if index.isdigit() else 0
        return None
    return None


def _device_function_data(function_data: FunctionData, device: int) -> FunctionData:
    parts: FunctionData = {}
    for name, entries in function_data.items():
        own = [(count, sample) for count, sample in entries if sample_device(sample) == device]
        parts[name] = own  # a function sampled elsewhere only has no samples here, not unknown ones
    return parts


def _attributed_frame(result: SplitResult) -> pd.DataFrame:
    rows = result.attributed()
    return pd.DataFrame(
        {
            "module_name": pd.Series(encoded.objects(rows["module_name"]), dtype=object),
            "function_name": pd.Series(encoded.objects(rows["function_name"]), dtype=object),
            "kernel_us": rows["kernel_us"].to_numpy(),
            "device": np.asarray(rows["device"].to_numpy(), dtype=np.int64),
        }
    )


def _by_device(result: SplitResult, top_k: int | None) -> list[tuple[int, pd.DataFrame]]:
    frame = _attributed_frame(result)
    return [
        (
            int(device),
            describe_results(
                frame[frame["device"] == device].drop(columns="device"),
                _device_function_data(result.function_data, int(device)),
                top_k,
            ),
        )
        for device in sorted(frame["device"].unique())
    ]


def _by_rank(result: SplitResult, top_k: int | None) -> list[tuple[int, pd.DataFrame]]:
    return [(rank, select_rank(result, rank).describe(top_k)) for rank in result_ranks(result)]


def describe_by(result: SplitResult, by: str, top_k: int | None = 10) -> pd.DataFrame:
    """The spec's summary once per device or per rank, stacked.

    Parameters
    ----------
    result:
        A result (``by="rank"``: merged, or one rank's).
    by:
        ``"device"`` or ``"rank"``.
    top_k:
        The most rows per part (a positive integer); None keeps all.

    Returns
    -------
    pandas.DataFrame
        Column ``by`` (int) then ``schema.SUMMARY_COLUMNS``; parts ascending, each most expensive
        first; shares are of the part's own attributed kernel time.

    Raises
    ------
    ValueError
        ``by`` is neither ``"device"`` nor ``"rank"``, or ``top_k`` is neither None nor a positive integer.
    """
    if by not in SPLITS:
        raise ValueError(f"by must be {one_of((None, *SPLITS))}; got {by!r}")
    top_k = check_top(top_k, "top_k")
    parts = _by_device(result, top_k) if by == "device" else _by_rank(result, top_k)
    frames = [summary.assign(**{by: key}) for key, summary in parts if not summary.empty]
    if not frames:
        return empty_summary().assign(**{by: pd.Series([], dtype=np.int64)})[[by, *schema.SUMMARY_COLUMNS]]
    table = pd.concat(frames, ignore_index=True)
    table[by] = table[by].astype(np.int64)
    return table[[by, *schema.SUMMARY_COLUMNS]]
