"""What the recorded calls of each sample launched, nested calls included: the replay's yardstick.

Inclusive because a replayed call runs its nested functional calls too, while the result gives a
kernel to the innermost call only (``docs/design.md``, "Replay"). Pure numpy / pandas; no torch.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import encoded
from ..results import ProfileResult


@dataclass(frozen=True)
class RecordedSample:
    """The recorded calls of one (function, sample): how many, their kernel times and kernel names."""

    calls: int
    call_us: tuple[float, ...]  # each call's kernel time, nested calls' kernels included
    kernels: Counter[str]  # kernel name -> launches, over all ``calls``

    @property
    def kernel_us(self) -> float:
        """Kernel time of all the calls."""
        return float(sum(self.call_us))

    @property
    def us_per_call(self) -> float:
        """The median kernel time of one recorded call (NaN without calls)."""
        return statistics.median(self.call_us) if self.call_us else float("nan")


def _positions(ids: np.ndarray, table_ids: np.ndarray) -> np.ndarray:
    """Row of each id in a table keyed by unique ``table_ids`` (-1 where absent)."""
    if len(table_ids) == 0:
        return np.full(len(ids), -1, dtype=np.int64)
    order = np.argsort(table_ids, kind="stable")
    sorted_ids = table_ids[order]
    pos = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return np.where(sorted_ids[pos] == ids, order[pos], -1)


def _enclosing_pairs(row_calls: np.ndarray, call_ids: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(activity row, call row) for every call enclosing each activity row's call, itself included."""
    rows = np.flatnonzero(row_calls >= 0)
    current = _positions(row_calls[rows], call_ids)
    keep = current >= 0
    rows, current = rows[keep], current[keep]
    pair_rows, pair_calls = [], []
    for _ in range(len(call_ids) + 1):  # a parent chain is never longer than the calls (guards cycles)
        if len(rows) == 0:
            break
        pair_rows.append(rows)
        pair_calls.append(current)
        parent_rows = _positions(parents[current], call_ids)
        keep = parent_rows >= 0
        rows, current = rows[keep], parent_rows[keep]
    if not pair_rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(pair_rows), np.concatenate(pair_calls)


def recorded_samples(result: ProfileResult) -> dict[tuple[str, int], RecordedSample]:
    """``(function_name, sample) -> RecordedSample`` of every sample with a linked call."""
    calls = encoded.decoded(result.calls.select(["call_id", "function_name", "parent_call_id", "sample"])).to_pandas()
    call_ids = calls["call_id"].to_numpy(np.int64)
    activity = encoded.decoded(result.activity.select(["call_id", "kernel", "kernel_us"])).to_pandas()
    rows, call_rows = _enclosing_pairs(
        activity["call_id"].to_numpy(np.int64), call_ids, calls["parent_call_id"].to_numpy(np.int64)
    )
    pairs = pd.DataFrame(
        {
            "call_row": call_rows,
            "kernel": activity["kernel"].to_numpy(object)[rows],
            "kernel_us": activity["kernel_us"].to_numpy(np.float64)[rows],
        }
    )
    call_us = pairs.groupby("call_row")["kernel_us"].sum()
    calls = calls.assign(kernel_us=call_us.reindex(range(len(calls)), fill_value=0.0).to_numpy())
    pairs = pairs.assign(
        function_name=calls["function_name"].to_numpy(object)[pairs["call_row"]],
        sample=calls["sample"].to_numpy(np.int64)[pairs["call_row"]],
    )
    launches = pairs[pairs["sample"] >= 0].groupby(["function_name", "sample", "kernel"]).size()
    kernels: dict[tuple[str, int], Counter[str]] = {}
    for (name, sample, kernel), count in launches.items():
        kernels.setdefault((name, int(sample)), Counter())[kernel] = int(count)
    return {
        (name, int(sample)): RecordedSample(
            calls=len(group),
            call_us=tuple(float(us) for us in group["kernel_us"]),
            kernels=kernels.get((name, int(sample)), Counter()),
        )
        for (name, sample), group in calls[calls["sample"] >= 0].groupby(["function_name", "sample"])
    }


def same_kernels_per_call(recorded: RecordedSample, replayed: Counter[str], replayed_calls: int) -> bool:
    """Whether one replayed call launches, on average, exactly the kernels one recorded call did.

    ``replayed`` counts launches per kernel name over ``replayed_calls`` calls; compared without division.
    """
    names = set(recorded.kernels) | set(replayed)
    return all(
        replayed.get(name, 0) * recorded.calls == recorded.kernels.get(name, 0) * replayed_calls for name in names
    )
