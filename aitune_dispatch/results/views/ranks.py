"""Several ranks (torch.distributed): :func:`merge` makes one result of per-rank results, so every
single-result view works on it, and :func:`select_rank` and the views across ranks read it back, in
pure Arrow / pandas (``docs/design.md``, "Ranks")."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ... import encoded, schema
from ...schema import FunctionData
from ...tensors import is_tensor_like, tensor_shape, tensor_strides
from .accounting import ResultTables, attributed, attributed_mask, is_result
from .comparison import compare
from .frames import STRING_DTYPE, empty_frame, with_strings


class RankedResult(ResultTables, Protocol):
    """What this module reads of a ``ProfileResult``; ``dataclasses.replace`` returns its own type."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def function_data(self) -> FunctionData: ...
    @property
    def module_objects(self) -> tuple[Any, ...]: ...
    @property
    def dropped_records(self) -> int: ...
    @property
    def warnings(self) -> tuple[str, ...]: ...
    @property
    def metadata(self) -> Mapping[str, str]: ...


Result = TypeVar("Result", bound=RankedResult)  # merge() and select_rank() return what they are given

# id columns shifted by merge(), and the id range each belongs to
ID_COLUMNS = {
    "op_id": "op",
    "module_id": "module",
    "parent_module_id": "module",
    "call_id": "call",
    "parent_call_id": "call",
}
_PER_RANK_KEYS = (schema.RANK_KEY, schema.LOCAL_RANK_KEY)  # never common to a merge


# -- which ranks a result holds ------------------------------------------------------------------------
def is_merged(result: RankedResult) -> bool:
    """Whether ``result`` came out of :func:`merge` (its activity has a ``rank`` column)."""
    return schema.RANK_COLUMN in result.activity.column_names


def own_rank(result: RankedResult) -> int:
    """The rank an unmerged result names in its metadata, 0 where it names none."""
    text = str(result.metadata.get(schema.RANK_KEY, "0"))
    return int(text) if text.isdigit() else 0


def result_ranks(result: RankedResult) -> list[int]:
    """The ranks ``result`` holds, ascending: ``merged_ranks`` of a merge, else its own rank."""
    if not is_merged(result):
        return [own_rank(result)]
    named = str(result.metadata.get(schema.MERGED_RANKS_KEY, ""))
    if named:
        return [int(rank) for rank in named.split(",")]
    return sorted(int(r) for r in pc.unique(result.activity[schema.RANK_COLUMN]).to_pylist())


def rank_records(result: RankedResult) -> dict[int, dict[str, Any]]:
    """A merged result's ``rank -> {"source", "dropped_records", "metadata"}`` (empty for an unmerged one)."""
    text = result.metadata.get(schema.RANK_METADATA_KEY)
    return {int(rank): entry for rank, entry in json.loads(text).items()} if text else {}


# -- merge ---------------------------------------------------------------------------------------------
def _tables(result: RankedResult) -> dict[str, pa.Table]:
    return {name: getattr(result, name) for name in schema.RESULT_TABLES}


def _id_range(result: RankedResult, space: str) -> int:
    """One more than the largest id of ``space`` any table of ``result`` holds (0 when none)."""
    largest = -1
    for table in _tables(result).values():
        for column, owner in ID_COLUMNS.items():
            if owner == space and column in table.column_names and table.num_rows:
                value = pc.max(table[column]).as_py()
                largest = max(largest, -1 if value is None else int(value))
    if space == "module":
        largest = max(largest, len(result.module_objects) - 1)
    return largest + 1


def _shift(table: pa.Table, offsets: Mapping[str, int]) -> pa.Table:
    for column, space in ID_COLUMNS.items():
        if column in table.column_names and offsets[space]:
            values = table[column]
            shifted = pc.if_else(pc.greater_equal(values, 0), pc.add(values, offsets[space]), values)
            table = table.set_column(table.schema.get_field_index(column), table.schema.field(column), shifted)
    return table


def _with_rank(table: pa.Table, rank: int) -> pa.Table:
    return table.append_column(
        pa.field(schema.RANK_COLUMN, pa.int64()), pa.array(np.full(table.num_rows, rank, np.int64))
    )


def sample_identity(value: Any) -> Any:
    """A hashable key, equal for two sample values that are the same sample; a tensor's equals its TensorMeta's."""
    if is_tensor_like(value):
        return (
            "tensor",
            tensor_shape(value),
            str(value.dtype).removeprefix("torch."),
            tensor_strides(value),
            str(getattr(value, "device", "")),
            str(getattr(value, "layout", "")).removeprefix("torch."),
        )
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(sample_identity(item) for item in value))
    if isinstance(value, dict):
        return ("dict", tuple((repr(key), sample_identity(item)) for key, item in value.items()))
    return ("value", repr(value))  # an OpaqueValue's repr is the repr it was saved from


def _merge_samples(ordered: Sequence[RankedResult]) -> tuple[FunctionData, list[dict[str, np.ndarray]]]:
    """Distinct samples of every rank, once each, and per rank ``function -> local index -> merged index``."""
    merged: FunctionData = {}
    keys: dict[str, dict[Any, int]] = {}
    remaps: list[dict[str, np.ndarray]] = []
    for result in ordered:
        remap = {}
        for name, entries in result.function_data.items():
            known = keys.setdefault(name, {})
            target = merged.setdefault(name, [])
            local = np.empty(len(entries), np.int64)
            for index, (count, sample) in enumerate(entries):
                key = sample_identity(sample)
                if key in known:
                    position = known[key]
                    target[position] = (target[position][0] + int(count), target[position][1])
                else:
                    position = known[key] = len(target)
                    target.append((int(count), sample))
                local[index] = position
            remap[name] = local
        remaps.append(remap)
    return merged, remaps


def _remap_samples(calls: pa.Table, remap: Mapping[str, np.ndarray]) -> pa.Table:
    if calls.num_rows == 0:
        return calls
    names = encoded.objects(calls["function_name"])
    samples = np.asarray(calls["sample"].to_numpy(), dtype=np.int64)
    out = np.full(len(samples), schema.NO_SAMPLE, np.int64)
    for name, table in remap.items():
        rows = (names == name) & (samples >= 0) & (samples < len(table))
        out[rows] = table[samples[rows]]
    index = calls.schema.get_field_index("sample")
    return calls.set_column(index, calls.schema.field("sample"), pa.array(out, pa.int64()))


def _ranks_of(results: Sequence[RankedResult], ranks: Sequence[int] | None) -> list[int]:
    if ranks is not None:
        if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Iterable):
            raise TypeError(
                f"ranks must be a list of integers, one per result, such as [0, 1]; got {type(ranks).__name__}"
            )
        chosen = list(ranks)
        bad = [rank for rank in chosen if isinstance(rank, bool) or not isinstance(rank, numbers.Integral)]
        if bad:
            raise TypeError(f"ranks must contain integers; got {bad!r}")
        chosen = [int(rank) for rank in chosen]
        if len(chosen) != len(results) or len(set(chosen)) != len(chosen) or min(chosen) < 0:
            raise ValueError(
                f"ranks must give one distinct non-negative rank per result ({len(results)} results); "
                f"got {list(ranks)!r}"
            )
        return chosen
    named = [result.metadata.get(schema.RANK_KEY) for result in results]
    if all(rank is None for rank in named):
        return list(range(len(results)))  # separate runs, no process group: ranks by position
    unnamed = [index for index, rank in enumerate(named) if rank is None]
    if unnamed:
        raise ValueError(
            f"results {unnamed} name no rank in their metadata while the others do; pass ranks=[...] "
            "to say which rank each result is"
        )
    chosen = [int(str(rank)) for rank in named]
    seen: dict[int, int] = {}
    for index, rank in enumerate(chosen):
        if rank in seen:
            raise ValueError(
                f"results {seen[rank]} and {index} are both rank {rank}; merge one result per rank, or pass "
                "ranks=[...] to number them yourself"
            )
        seen[rank] = index
    return chosen


def _common_metadata(ordered: Sequence[RankedResult]) -> dict[str, str]:
    first = {str(k): str(v) for k, v in ordered[0].metadata.items() if k not in _PER_RANK_KEYS}
    return {
        key: value
        for key, value in first.items()
        if all(str(result.metadata.get(key)) == value and key in result.metadata for result in ordered[1:])
    }


def _missing_ranks_warning(ranks: Sequence[int], metadata: Mapping[str, str]) -> list[str]:
    size = metadata.get(schema.WORLD_SIZE_KEY, "")
    if not size.isdigit():
        return []
    missing = sorted(set(range(int(size))) - set(ranks))
    if not missing:
        return []
    return [
        f"merged {len(ranks)} of {size} ranks: ranks {missing} are missing, so totals across ranks cover "
        "part of the job; merge (or save into the directory) every rank's result"
    ]


def merge(results: Sequence[Result], *, ranks: Sequence[int] | None = None) -> Result:
    """One result of several ranks' results, with a ``rank`` column in every table.

    Parameters
    ----------
    results:
        One :class:`ProfileResult` per rank (fresh or loaded), in any order.
    ranks:
        The rank of each result; None takes ``metadata["rank"]``, or numbers results 0, 1, ... in
        the order given when none names a rank.

    Returns
    -------
    ProfileResult
        Rows in rank order (``docs/design.md``, "Ranks").

    Raises
    ------
    TypeError
        ``results`` is not a sequence of ProfileResults.
    ValueError
        No results, a result that is itself a merge, two results of one rank, or only some naming their rank.
    """
    if is_result(results) or not isinstance(results, Sequence):
        raise TypeError("merge() takes a list of ProfileResults, one per rank, e.g. merge([rank0, rank1])")
    bad = [type(r).__name__ for r in results if not is_result(r)]
    if bad:
        raise TypeError(f"merge() takes ProfileResults; got {bad}")
    if not results:
        raise ValueError("merge() needs at least one result")
    merged_already = [index for index, result in enumerate(results) if is_merged(result)]
    if merged_already:
        raise ValueError(
            f"results {merged_already} are merges already; merge the per-rank results themselves "
            "(select_rank(result, r) gives one rank back)"
        )
    order = sorted(zip(_ranks_of(results, ranks), results), key=lambda pair: pair[0])
    rank_list = [rank for rank, _ in order]
    ordered = [result for _, result in order]
    function_data, remaps = _merge_samples(ordered)
    offsets = {space: 0 for space in set(ID_COLUMNS.values())}
    parts: dict[str, list[pa.Table]] = {}
    objects: list[Any] = []
    for rank, result, remap in zip(rank_list, ordered, remaps):
        for name, table in _tables(result).items():
            if name == "calls":
                table = _remap_samples(table, remap)
            shifted = _shift(table, offsets)
            parts.setdefault(name, []).append(shifted if name in schema.RANKED_BY_CALL else _with_rank(shifted, rank))
        modules = _id_range(result, "module")
        objects += list(result.module_objects) + [None] * (modules - len(result.module_objects))
        for space in offsets:
            offsets[space] += _id_range(result, space)
    # each rank's string columns have their own dictionaries: concatenated, a column has one per rank;
    # encoded() unites them into one (group_by and take need one dictionary per column)
    tables = {
        name: encoded.encoded(pa.concat_tables(pieces, promote_options="default")) for name, pieces in parts.items()
    }
    metadata = _common_metadata(ordered)
    metadata[schema.MERGED_RANKS_KEY] = ",".join(map(str, rank_list))
    metadata[schema.RANK_METADATA_KEY] = json.dumps(
        {
            str(rank): {
                "source": result.source,
                "dropped_records": int(result.dropped_records),
                "metadata": {str(k): str(v) for k, v in result.metadata.items()},
            }
            for rank, result in zip(rank_list, ordered)
        },
        sort_keys=True,
    )
    warnings = [f"rank {rank}: {text}" for rank, result in zip(rank_list, ordered) for text in result.warnings]
    return dataclasses.replace(
        ordered[0],
        **tables,
        function_data=function_data,
        source="+".join(dict.fromkeys(result.source for result in ordered)),
        module_objects=tuple(objects) if any(result.module_objects for result in ordered) else (),
        dropped_records=sum(int(result.dropped_records) for result in ordered),
        warnings=(*warnings, *_missing_ranks_warning(rank_list, metadata)),
        metadata=metadata,
    )


# -- one rank back ---------------------------------------------------------------------------------------
def _rank_function_data(calls: pa.Table, function_data: FunctionData) -> tuple[FunctionData, pa.Table]:
    """The samples ``calls`` refer to, counted over those calls, and the calls re-indexed onto them."""
    if calls.num_rows == 0:
        return {}, calls
    names = encoded.objects(calls["function_name"])
    samples = np.asarray(calls["sample"].to_numpy(), dtype=np.int64)
    out = np.full(len(samples), schema.NO_SAMPLE, np.int64)
    data: FunctionData = {}
    for name in dict.fromkeys(names[samples >= 0]):
        entries = function_data.get(name, [])
        rows = (names == name) & (samples >= 0) & (samples < len(entries))
        used, local, counts = np.unique(samples[rows], return_inverse=True, return_counts=True)
        out[rows] = local
        data[name] = [(int(count), entries[index][1]) for index, count in zip(used, counts)]
    index = calls.schema.get_field_index("sample")
    return data, calls.set_column(index, calls.schema.field("sample"), pa.array(out, pa.int64()))


def select_rank(result: Result, rank: int) -> Result:
    """The part of a merged result that one rank recorded, as that rank's own result.

    Parameters
    ----------
    result:
        A merged result (an unmerged one is returned as is when ``rank`` is its own).
    rank:
        The rank to keep.

    Returns
    -------
    ProfileResult
        That rank's rows, source, metadata and warnings, with the merged ids; ``function_data``
        counted over its calls (empty where the calls carry no sample links).

    Raises
    ------
    ValueError
        ``rank`` is not one of the result's ranks.
    """
    ranks = result_ranks(result)
    if rank not in ranks:
        raise ValueError(f"rank {rank!r} is not in this result; it holds ranks {ranks}")
    if not is_merged(result):
        return result
    tables = {}
    for name, table in _tables(result).items():
        if name not in schema.RANKED_BY_CALL and schema.RANK_COLUMN in table.column_names:
            table = table.filter(pc.equal(table[schema.RANK_COLUMN], rank)).drop_columns([schema.RANK_COLUMN])
        tables[name] = table
    rank_calls = pc.unique(tables["calls"]["call_id"])
    for name in schema.RANKED_BY_CALL:  # the rows of the rank's calls
        tables[name] = tables[name].filter(pc.is_in(tables[name]["call_id"], value_set=rank_calls))
    function_data, tables["calls"] = _rank_function_data(tables["calls"], result.function_data)
    record = rank_records(result).get(rank, {})
    prefix = f"rank {rank}: "
    return dataclasses.replace(
        result,
        **tables,
        function_data=function_data,
        source=str(record.get("source", result.source)),
        # indexed by the merged module ids, which this rank's modules keep
        module_objects=result.module_objects or (None,) * _id_range(result, "module"),
        dropped_records=int(record.get("dropped_records", 0)),
        warnings=tuple(text[len(prefix) :] for text in result.warnings if text.startswith(prefix)),
        metadata=dict(record.get("metadata", {})),
    )


# -- the views across ranks ---------------------------------------------------------------------------
# ops that are collectives: torch.distributed's c10d ops and the functional collectives
COLLECTIVE_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::")
NCCL_KERNEL = r"^(void )?nccl"  # NCCL's kernels (ncclDevKernel_AllReduce_Sum_f32_RING_LL, ...)


def compare_ranks(result: RankedResult, before: int, after: int) -> pd.DataFrame:
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


def _activity_ranks(result: RankedResult) -> np.ndarray:
    if is_merged(result):
        return np.asarray(result.activity[schema.RANK_COLUMN].to_numpy(), dtype=np.int64)
    return np.full(result.activity.num_rows, own_rank(result), np.int64)


def _mask(values: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)


def _activity_frame(result: RankedResult) -> pd.DataFrame:
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


def _hosts(result: RankedResult) -> dict[int, str]:
    if not is_merged(result):
        return {own_rank(result): str(result.metadata.get(schema.HOST_KEY, ""))}
    return {
        rank: str(record.get("metadata", {}).get(schema.HOST_KEY, "")) for rank, record in rank_records(result).items()
    }


def rank_summary(result: RankedResult) -> pd.DataFrame:
    """One row per rank: where it ran, its kernel time, coverage and time in collectives.

    Parameters
    ----------
    result:
        A merged result (or one rank's).

    Returns
    -------
    pandas.DataFrame
        ``schema.RANK_SUMMARY_COLUMNS``, ranks ascending.
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
    return with_strings(table.astype({"rank": np.int64, "activity_rows": np.int64}), ("host", "devices"))


def function_ranks(result: RankedResult) -> pd.DataFrame:
    """Per functional call across ranks: mean, min and max attributed kernel time, the slowest rank.

    Parameters
    ----------
    result:
        A merged result (or one rank's).

    Returns
    -------
    pandas.DataFrame
        ``schema.RANK_FUNCTION_COLUMNS``, largest ``max_us`` first; a rank where the function
        launched nothing counts 0 µs.
    """
    ranks = result_ranks(result)
    rows = attributed(result.activity)
    if rows.num_rows == 0:
        counts = {"ranks": np.int64, "slowest_rank": np.int64}
        return empty_frame(schema.RANK_FUNCTION_COLUMNS, counts, ("function_name",))
    frame = pd.DataFrame(
        {
            "rank": _activity_ranks(result)[_mask(attributed_mask(result.activity))],
            "function_name": encoded.objects(rows["function_name"]),
            "kernel_us": rows["kernel_us"].to_numpy(),
        }
    )
    per_rank = frame.pivot_table(index="function_name", columns="rank", values="kernel_us", aggfunc="sum")
    per_rank = per_rank.reindex(columns=ranks).fillna(0.0)
    values = per_rank.to_numpy(dtype=float)
    table = pd.DataFrame(
        {
            "function_name": pd.Series(list(per_rank.index), dtype=STRING_DTYPE),
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


_COLLECTIVE_STRINGS = ("module_name", "op", "kernel")


def collectives(result: RankedResult) -> pd.DataFrame:
    """The collectives' kernels per rank, with the module and collective op that launched them.

    Parameters
    ----------
    result:
        A merged result (or one rank's).

    Returns
    -------
    pandas.DataFrame
        ``schema.COLLECTIVE_COLUMNS``, one row per (rank, module, op, kernel), ranks ascending,
        largest first within a rank.
    """
    activity = result.activity
    if activity.num_rows == 0:
        return empty_frame(schema.COLLECTIVE_COLUMNS, {"rank": np.int64, "calls": np.int64}, _COLLECTIVE_STRINGS)
    mask = _mask(collective_mask(activity))
    rows = activity.filter(pa.array(mask))
    frame = pd.DataFrame(
        {
            "rank": _activity_ranks(result)[mask],
            **{name: pd.Series(encoded.objects(rows[name]), dtype=object) for name in _COLLECTIVE_STRINGS},
            "kernel_us": rows["kernel_us"].to_numpy(),
        }
    )
    keys = ["rank", "module_name", "op", "kernel"]
    grouped = frame.groupby(keys, dropna=False, sort=False)["kernel_us"].agg(["size", "sum"]).reset_index()
    table = grouped.rename(columns={"size": "calls", "sum": "total_us"})
    table = with_strings(table, _COLLECTIVE_STRINGS)
    table = table.sort_values(["rank", "total_us"], ascending=[True, False], kind="stable")
    return table.astype({"rank": np.int64, "calls": np.int64})[schema.COLLECTIVE_COLUMNS].reset_index(drop=True)
