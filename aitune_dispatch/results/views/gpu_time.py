"""When each device was busy during the profiled passes, and what the host ran while it idled.

A large model's first diagnosis is *launch-bound or compute-bound?*: a device busy for a small part of
the pass waits on the host. The passes are the root module's calls (one per recorded sample); device
activity is laid on the host clock (``clock.activity_minus_host_ns``) and clipped to them. Busy time is
the union of the device's activity intervals, so overlapping streams count once per device.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ... import schema
from .accounting import ResultTables
from .clock import activity_minus_host_ns
from .frames import STRING_DTYPE
from .modules import module_labels
from .top import check_top

BUSY_COLUMNS = ["device", "stream", "wall_us", "busy_us", "busy_share", "idle_us", "launches"]
GAP_COLUMNS = ["device", "sample", "start_us", "end_us", "gap_us", "host_modules"]
GAP_MODULES = 3  # modules named per gap, most host time first


def _roots(result: ResultTables) -> pa.Array:
    parents = result.modules["parent_module_id"]
    is_root = pc.fill_null(pc.less(parents, 0), True)
    return result.modules.filter(is_root)["module_id"].combine_chunks()


def pass_windows(result: ResultTables) -> np.ndarray:
    """``(start_ns, end_ns)`` on the host clock of every profiled pass (the root module's calls), in order.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    numpy.ndarray
        Shape ``(passes, 2)``, int64; empty where the result recorded no module call times.
    """
    calls = result.module_calls
    if calls.num_rows == 0 or result.modules.num_rows == 0:
        return np.empty((0, 2), np.int64)
    rows = calls.filter(pc.is_in(calls["module_id"], value_set=_roots(result)))
    starts = np.asarray(rows["start_ns"].to_numpy(zero_copy_only=False), np.int64)
    ends = np.asarray(rows["end_ns"].to_numpy(zero_copy_only=False), np.int64)
    order = np.argsort(starts, kind="stable")
    windows = np.stack([starts[order], np.maximum(ends[order], starts[order])], axis=1)
    return windows[windows[:, 1] > windows[:, 0]] if len(windows) else windows


def _device_rows(result: ResultTables) -> pd.DataFrame:
    """Device activity on the host clock: ``device, stream, start, end`` (ns)."""
    activity = result.activity
    if activity.num_rows == 0:
        return pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in ("device", "stream", "start", "end")})
    on_device = pc.and_(
        pc.not_equal(activity["kind"].cast(pa.string()), schema.KIND_CPU_OP), pc.greater_equal(activity["device"], 0)
    )
    rows = activity.filter(pc.fill_null(on_device, False))
    offset, _ = activity_minus_host_ns(result.activity, result.ops, result.metadata)
    frame = pd.DataFrame(
        {
            "device": np.asarray(rows["device"].to_numpy(zero_copy_only=False), np.int64),
            "stream": np.asarray(pc.fill_null(rows["stream"], -1).to_numpy(zero_copy_only=False), np.int64),
            "start": np.asarray(rows["start_ns"].to_numpy(zero_copy_only=False), np.int64) - offset,
            "end": np.asarray(rows["end_ns"].to_numpy(zero_copy_only=False), np.int64) - offset,
        }
    )
    frame["end"] = np.maximum(frame["end"], frame["start"])
    return frame


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint intervals covering ``[starts, ends)``, in order."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    # a new interval begins where a start lies after every end before it
    begins = np.concatenate([[True], starts[1:] > ends[:-1]])
    first = np.flatnonzero(begins)
    last = np.concatenate([first[1:] - 1, [len(starts) - 1]])
    return starts[first], ends[last]


def _clipped(starts: np.ndarray, ends: np.ndarray, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low, high = int(window[0]), int(window[1])
    keep = (ends > low) & (starts < high)
    return np.clip(starts[keep], low, high), np.clip(ends[keep], low, high)


def _busy_ns(starts: np.ndarray, ends: np.ndarray, windows: np.ndarray) -> int:
    merged_starts, merged_ends = _union(starts, ends)
    return int(sum(int(np.sum(e - s)) for s, e in (_clipped(merged_starts, merged_ends, w) for w in windows)))


def device_busy(result: ResultTables) -> pd.DataFrame:
    """How long each device (and each of its streams) was busy during the profiled passes.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    pandas.DataFrame
        ``BUSY_COLUMNS``, per device one row with ``stream`` missing (the device over all its
        streams: overlapping streams count once) followed by one row per stream. ``wall_us``: the
        passes' wall time, summed over samples; ``busy_us``: the union of the device's activity inside
        them; ``busy_share = busy_us / wall_us``; ``idle_us = wall_us - busy_us``; ``launches``: the
        device's activity rows (int64). Empty for a result with no device activity (the CPU source).
    """
    rows, windows = _device_rows(result), pass_windows(result)
    wall_ns = int(np.sum(windows[:, 1] - windows[:, 0])) if len(windows) else 0
    records = []
    for device, on_device in rows.groupby("device", sort=True):
        groups = [(pd.NA, on_device), *((stream, part) for stream, part in on_device.groupby("stream", sort=True))]
        for stream, part in groups:
            busy = _busy_ns(part["start"].to_numpy(), part["end"].to_numpy(), windows)
            records.append((int(device), stream, wall_ns / 1e3, busy / 1e3, len(part)))
    frame = pd.DataFrame(records, columns=["device", "stream", "wall_us", "busy_us", "launches"])
    frame["device"] = frame["device"].astype(np.int64)
    frame["stream"] = frame["stream"].astype("Int64")
    frame["wall_us"] = frame["wall_us"].astype(np.float64)
    frame["busy_us"] = frame["busy_us"].astype(np.float64)
    frame["launches"] = frame["launches"].astype(np.int64)
    frame["busy_share"] = (frame["busy_us"] / frame["wall_us"]).where(frame["wall_us"] > 0, 0.0)
    frame["idle_us"] = frame["wall_us"] - frame["busy_us"]
    return frame[BUSY_COLUMNS]


class _InnermostModules:
    """Which module the host was innermost in at each moment, per thread, from the module calls."""

    def __init__(self, result: ResultTables) -> None:
        calls = result.module_calls.to_pydict()
        per_thread: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        columns = (calls["module_id"], calls["start_ns"], calls["end_ns"], calls["thread"])
        for module_id, start, end, thread in zip(*columns):
            per_thread[int(thread or 0)].append((int(start), -int(max(end, start)), int(module_id)))
        self.segments = {thread: self._segments(sorted(spans)) for thread, spans in per_thread.items()}
        labels = module_labels(result)
        self.labels = {module_id: label for module_id, (label, _) in labels.items()}

    @staticmethod
    def _segments(spans: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        starts: list[int] = []
        ends: list[int] = []
        owners: list[int] = []

        def emit(start: int, end: int, owner: int) -> None:
            if end > start:
                starts.append(start)
                ends.append(end)
                owners.append(owner)

        stack: list[tuple[int, int]] = []  # (end, module_id), innermost last
        cursor = 0
        for start, negative_end, module_id in spans:
            while stack and stack[-1][0] <= start:
                end, owner = stack.pop()
                emit(cursor, end, owner)
                cursor = end
            if stack:
                emit(cursor, start, stack[-1][1])
            cursor = start
            stack.append((min(-negative_end, stack[-1][0]) if stack else -negative_end, module_id))
        while stack:
            end, owner = stack.pop()
            emit(cursor, end, owner)
            cursor = end
        return np.asarray(starts, np.int64), np.asarray(ends, np.int64), np.asarray(owners, np.int64)

    def during(self, start: int, end: int) -> str:
        """The labels of the innermost modules the host ran in ``[start, end)``, most time first."""
        spent: dict[int, int] = defaultdict(int)
        for starts, ends, owners in self.segments.values():
            first = int(np.searchsorted(ends, start, side="right"))
            last = int(np.searchsorted(starts, end, side="left"))
            for index in range(first, last):
                spent[int(owners[index])] += min(end, int(ends[index])) - max(start, int(starts[index]))
        ranked = sorted((ns for ns in spent.items() if ns[1] > 0), key=lambda item: (-item[1], item[0]))
        return ", ".join(self.labels.get(module_id, str(module_id)) for module_id, _ in ranked[:GAP_MODULES])


def idle_gaps(result: ResultTables, min_gap_us: float = 5.0, top: int | None = None) -> pd.DataFrame:
    """The stretches of each pass in which a device ran nothing, longest first.

    Parameters
    ----------
    result:
        A finished (or loaded) result.
    min_gap_us:
        Leave out gaps shorter than this (µs).
    top:
        Keep only the ``top`` longest gaps (a positive integer); None keeps all.

    Returns
    -------
    pandas.DataFrame
        ``GAP_COLUMNS``: the device, the sample whose pass the gap is in (0-based, in run order), the
        gap's start and end in µs after that pass began, its length, and ``host_modules``: the innermost
        modules the host ran during it (up to ``GAP_MODULES``, most time first, comma-separated).
        A pass's start before the device's first activity and its end after the last count as gaps.

    Raises
    ------
    ValueError
        ``top`` is neither None nor a positive integer.
    """
    top = check_top(top)
    rows, windows = _device_rows(result), pass_windows(result)
    found: list[tuple[int, int, int, int]] = []  # (device, sample, start_ns, end_ns)
    for device, on_device in rows.groupby("device", sort=True):
        merged_starts, merged_ends = _union(on_device["start"].to_numpy(), on_device["end"].to_numpy())
        for sample, window in enumerate(windows):
            starts, ends = _clipped(merged_starts, merged_ends, window)
            bounds_start = np.concatenate([[window[0]], ends])
            bounds_end = np.concatenate([starts, [window[1]]])
            for gap_start, gap_end in zip(bounds_start, bounds_end):
                if (gap_end - gap_start) / 1e3 >= min_gap_us and gap_end > gap_start:
                    found.append((int(device), sample, int(gap_start), int(gap_end)))
    found.sort(key=lambda gap: (-(gap[3] - gap[2]), gap[0], gap[1], gap[2]))
    if top is not None:
        found = found[:top]
    hosts = _InnermostModules(result) if found else None
    records = [
        (
            device,
            sample,
            (start - windows[sample][0]) / 1e3,
            (end - windows[sample][0]) / 1e3,
            (end - start) / 1e3,
            hosts.during(start, end) if hosts else "",
        )
        for device, sample, start, end in found
    ]
    frame = pd.DataFrame(records, columns=GAP_COLUMNS)
    for column in ("device", "sample"):
        frame[column] = frame[column].astype(np.int64)
    for column in ("start_us", "end_us", "gap_us"):
        frame[column] = frame[column].astype(np.float64)
    frame["host_modules"] = frame["host_modules"].astype(STRING_DTYPE)
    return frame
