"""The views across the ranks of a merged result: per rank, per functional call, the collectives.

Pure pandas / Arrow over a result that :func:`~aitune_dispatch.results.ranks.merge` made (an
unmerged result counts as one rank, the one its metadata names). Every time is attributed or
total kernel time in microseconds, as in the other views; collectives are the activity rows of a
c10d / functional-collective op or of an ``nccl*`` kernel. No torch.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .. import encoded, schema
from .comparison import compare
from .profile_result import ProfileResult
from .ranks import is_merged, own_rank, rank_records, result_ranks, select_rank
from .views import attributed_mask

# ops that are collectives: torch.distributed's c10d ops and the functional collectives
COLLECTIVE_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::")
NCCL_KERNEL = r"^(void )?nccl"  # NCCL's kernels (ncclDevKernel_AllReduce_Sum_f32_RING_LL, ...)


def compare_ranks(result: ProfileResult, before: int, after: int) -> pd.DataFrame:
    """:func:`~aitune_dispatch.compare` of two ranks of a merged result.

    Parameters
    ----------
    result:
        A merged result.
    before, after:
        The ranks compared (``before`` plays ``compare``'s ``a``).

    Returns
    -------
    pandas.DataFrame
        ``compare(select_rank(result, before), select_rank(result, after))``.
    """
    return compare(select_rank(result, before), select_rank(result, after))


def _is_collective_op(ops: pa.Array) -> pa.Array:
    found = pc.starts_with(ops, COLLECTIVE_OP_PREFIXES[0])
    for prefix in COLLECTIVE_OP_PREFIXES[1:]:
        found = pc.or_(found, pc.starts_with(ops, prefix))
    return found


def collective_mask(activity: pa.Table) -> pa.BooleanArray:
    """Activity rows of collectives: an op of ``COLLECTIVE_OP_PREFIXES`` or an ``nccl*`` kernel (tested once per
    distinct name)."""
    nccl = encoded.matches(activity["kernel"], lambda kernels: pc.match_substring_regex(kernels, NCCL_KERNEL))
    return pc.or_(nccl, encoded.matches(activity["op"], _is_collective_op))


def _activity_ranks(result: ProfileResult) -> np.ndarray:
    if is_merged(result):
        return np.asarray(result.activity[schema.RANK_COLUMN].to_numpy(), dtype=np.int64)
    return np.full(result.activity.num_rows, own_rank(result), np.int64)


def _mask(values: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)


def _activity_frame(result: ProfileResult) -> pd.DataFrame:
    activity = result.activity
    return pd.DataFrame(
        {
            "rank": _activity_ranks(result),
            "kernel_us": activity["kernel_us"].to_numpy(),
            "device": activity["device"].to_numpy(),
            "kind": encoded.objects(activity["kind"]),
            "attributed": _mask(attributed_mask(activity)),
            "collective": _mask(collective_mask(activity)),
        }
    )


def _hosts(result: ProfileResult) -> dict[int, str]:
    if not is_merged(result):
        return {own_rank(result): str(result.metadata.get(schema.HOST_KEY, ""))}
    return {
        rank: str(record.get("metadata", {}).get(schema.HOST_KEY, "")) for rank, record in rank_records(result).items()
    }


def rank_summary(result: ProfileResult) -> pd.DataFrame:
    """One row per rank: where it ran, its kernel time, coverage and time in collectives.

    Parameters
    ----------
    result:
        A merged result (or one rank's).

    Returns
    -------
    pandas.DataFrame
        Columns ``schema.RANK_SUMMARY_COLUMNS``, ranks ascending; ``coverage`` is NaN for a rank
        that recorded nothing.
    """
    frame = _activity_frame(result)
    hosts = _hosts(result)
    rows = []
    for rank in result_ranks(result):
        own = frame[frame["rank"] == rank]
        gpu = own[(own["device"] >= 0) & (own["kind"] != schema.KIND_CPU_OP)]
        total = float(own["kernel_us"].sum())
        attributed = float(own.loc[own["attributed"], "kernel_us"].sum())
        rows.append(
            {
                "rank": rank,
                "host": hosts.get(rank, ""),
                "devices": ",".join(str(int(d)) for d in sorted(gpu["device"].unique())),
                "activity_rows": len(own),
                "total_us": total,
                "attributed_us": attributed,
                "coverage": attributed / total if total > 0 else math.nan,
                "collective_us": float(own.loc[own["collective"], "kernel_us"].sum()),
            }
        )
    table = pd.DataFrame(rows, columns=schema.RANK_SUMMARY_COLUMNS)
    return table.astype({"rank": np.int64, "activity_rows": np.int64, "host": object, "devices": object})


def function_ranks(result: ProfileResult) -> pd.DataFrame:
    """Per functional call across ranks: mean, min and max attributed kernel time, the slowest rank.

    Parameters
    ----------
    result:
        A merged result (or one rank's).

    Returns
    -------
    pandas.DataFrame
        Columns ``schema.RANK_FUNCTION_COLUMNS``, one row per function that launched attributed
        kernels on any rank, largest ``max_us`` first. A rank where the function launched nothing
        counts 0 µs (so ``min_us`` is 0 and ``ranks`` is below the rank count); ``imbalance`` is
        ``max_us / mean_us``.
    """
    ranks = result_ranks(result)
    attributed = result.attributed()
    if attributed.num_rows == 0:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in schema.RANK_FUNCTION_COLUMNS})
    frame = pd.DataFrame(
        {
            "rank": _activity_ranks(result)[_mask(attributed_mask(result.activity))],
            "function_name": encoded.objects(attributed["function_name"]),
            "kernel_us": attributed["kernel_us"].to_numpy(),
        }
    )
    per_rank = frame.pivot_table(index="function_name", columns="rank", values="kernel_us", aggfunc="sum")
    per_rank = per_rank.reindex(columns=ranks).fillna(0.0)
    values = per_rank.to_numpy(dtype=float)
    table = pd.DataFrame(
        {
            "function_name": pd.Series(list(per_rank.index), dtype=object),
            "ranks": (values > 0).sum(axis=1).astype(np.int64),
            "mean_us": values.mean(axis=1),
            "min_us": values.min(axis=1),
            "max_us": values.max(axis=1),
            "slowest_rank": np.asarray(ranks, np.int64)[values.argmax(axis=1)],
        }
    )
    table["imbalance"] = table["max_us"] / table["mean_us"].where(table["mean_us"] > 0)
    table = table.sort_values(["max_us", "function_name"], ascending=[False, True], kind="stable")
    return table[schema.RANK_FUNCTION_COLUMNS].reset_index(drop=True)


def collectives(result: ProfileResult) -> pd.DataFrame:
    """The collectives' kernels per rank, with the module and collective op that launched them.

    Parameters
    ----------
    result:
        A merged result (or one rank's).

    Returns
    -------
    pandas.DataFrame
        Columns ``schema.COLLECTIVE_COLUMNS``, one row per (rank, module, op, kernel), ranks
        ascending and the largest first within a rank. Collectives are rows whose op is a c10d or
        functional-collective op, or whose kernel is an ``nccl*`` kernel.
    """
    activity = result.activity
    if activity.num_rows == 0:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in schema.COLLECTIVE_COLUMNS})
    mask = _mask(collective_mask(activity))
    rows = activity.filter(pa.array(mask))
    frame = pd.DataFrame(
        {
            "rank": _activity_ranks(result)[mask],
            **{name: pd.Series(encoded.objects(rows[name]), dtype=object) for name in ("module_name", "op", "kernel")},
            "kernel_us": rows["kernel_us"].to_numpy(),
        }
    )
    keys = ["rank", "module_name", "op", "kernel"]
    grouped = frame.groupby(keys, dropna=False, sort=False)["kernel_us"].agg(["size", "sum"]).reset_index()
    table = grouped.rename(columns={"size": "calls", "sum": "total_us"})
    for column in ("module_name", "op", "kernel"):
        table[column] = table[column].astype(object).where(table[column].notna(), None)
    table = table.sort_values(["rank", "total_us"], ascending=[True, False], kind="stable")
    return table.astype({"rank": np.int64, "calls": np.int64})[schema.COLLECTIVE_COLUMNS].reset_index(drop=True)
