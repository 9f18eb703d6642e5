"""Per CUDA graph, what its replays launched: the totals a replay of an unobserved graph still has.

A graph captured where no profiler saw it is replayed as kernels without a functional call
(``attribution == 'graph_launch'``); this view says, per graph, how many times it was replayed, how
many kernels and how much time that was, and how much of it was attributed from an observed capture.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ... import encoded, schema
from .accounting import ResultTables, total_us
from .frames import empty_frame

GRAPH_REPLAY_COLUMNS = ["graph_id", "replays", "kernels", "kernels_per_replay", "total_us", "share", "attributed"]


def graph_replays(result: ResultTables) -> pd.DataFrame:
    """One row per CUDA graph the passes replayed, most kernel time first.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    pandas.DataFrame
        ``GRAPH_REPLAY_COLUMNS``: ``graph_id`` (CUPTI's), ``replays`` (distinct graph launches),
        ``kernels`` (activity rows, copies and sets included) and ``kernels_per_replay``, their
        ``total_us`` and ``share`` of all activity time, and ``attributed``: the fraction of its rows
        attributed from their capture or Inductor's call sites, not left on the replaying launch
        (0 for a graph captured where neither ``profile()`` nor ``observe_graph_captures`` saw it).
    """
    activity = result.activity
    if activity.num_rows == 0:
        return _empty()
    replayed = activity.filter(pc.not_equal(activity["graph_id"], schema.NOT_IN_GRAPH))
    if replayed.num_rows == 0:
        return _empty()
    frame = pd.DataFrame(
        {
            "graph_id": replayed["graph_id"].to_numpy(),
            "correlation_id": replayed["correlation_id"].to_numpy(),
            "us": np.asarray(replayed["kernel_us"].to_numpy(zero_copy_only=False), np.float64),
            "attributed": encoded.objects(replayed["attribution"]) != schema.ATTRIBUTION_GRAPH_LAUNCH,
        }
    )
    grouped = frame.groupby("graph_id", sort=False)
    table = pd.DataFrame(
        {
            "replays": grouped["correlation_id"].nunique().astype(np.int64),
            "kernels": grouped.size().astype(np.int64),
            "total_us": grouped["us"].sum(),
            "attributed": grouped["attributed"].mean().astype(np.float64),
        }
    ).reset_index()
    table["kernels_per_replay"] = table["kernels"] / table["replays"]
    total = total_us(activity)
    table["share"] = table["total_us"] / total if total > 0 else 0.0
    table = table.sort_values(["total_us", "graph_id"], ascending=[False, True], kind="stable")
    return table[GRAPH_REPLAY_COLUMNS].reset_index(drop=True)


def _empty() -> pd.DataFrame:
    counts = {"graph_id": np.int64, "replays": np.int64, "kernels": np.int64}
    return empty_frame(GRAPH_REPLAY_COLUMNS, counts)
