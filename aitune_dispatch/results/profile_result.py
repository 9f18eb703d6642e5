"""The finished, immutable result of one ``profile()`` run: Arrow tables plus the spec's views."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..joining import attributed_mask
from .samples import sample_table
from .summary import describe_results

FunctionData = dict[str, list[tuple[int, Any]]]


def _object_column(values: Sequence[Any], index: np.ndarray) -> np.ndarray:
    table = np.empty(len(values), dtype=object)
    for pos, value in enumerate(values):  # element-wise: containers such as nn.Sequential stay whole
        table[pos] = value
    return table[index] if len(index) else np.empty(0, dtype=object)


# the dtype pandas gives a column of Python strings: "str" (Arrow-backed) from pandas 3, else object
_INFERRED_STRING = pd.Series(["a"]).dtype


def _string_column(column: pa.ChunkedArray) -> Any:
    """``column`` in the dtype pandas would infer from Python strings, built without per-row work."""
    if isinstance(_INFERRED_STRING, pd.StringDtype):
        return pd.array(column.combine_chunks().cast(pa.large_string()), dtype=_INFERRED_STRING)
    return _strings(column)


def _strings(column: pa.ChunkedArray) -> np.ndarray:
    """An object array that shares one Python string per distinct value (few, for kernel names)."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    words = np.empty(len(encoded.dictionary) + 1, dtype=object)
    words[:-1] = encoded.dictionary.to_pylist()
    words[-1] = None
    return words[encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)]


@dataclass(frozen=True, repr=False)
class ProfileResult:
    """Everything one run recorded, attributed or not (immutable; ``profile_result()`` returns one).

    Attributes
    ----------
    activity:
        One row per kernel / memcpy / memset (or CPU op) with its op, module and innermost
        functional call: ``schema.ACTIVITY`` (``correlation_id, kernel, kind, start_ns, end_ns,
        kernel_us, device, stream, op_id, op, module_id, module_name, call_id, function_name,
        thread``; ``module_id = -1`` outside the hierarchy, ``call_id = -1`` outside any functional
        call, null ``op_id`` when no op claimed the kernel).
    ops, calls, modules, module_calls:
        The trace: every aten op (``schema.OPS``), functional call with its parent
        (``schema.CALLS``), module of the hierarchy (``schema.MODULES``) and module forward
        (``schema.MODULE_CALLS``).
    function_data:
        The spec's ``function_data``: ``function_name -> [(count, (args, kwargs)), ...]``, one entry
        per distinct sample.
    source:
        The activity source: ``cupti/native``, ``cupti/python`` or ``cpu``.
    module_objects:
        The profiled ``nn.Module`` objects by ``module_id`` (empty for a loaded result).
    dropped_records:
        Activity records CUPTI dropped (0 when none were lost).
    warnings:
        Problems of the run, in words.
    metadata:
        ``torch``, ``device``, ``op_tracer``, ``functions``, phase times (``seconds_*``), clock facts,
        and how compiled kernels and CUDA graph replays were attributed (``schema.META_*``).
    kernel_sources:
        Every FX source (functional call or other call) each attributed compiled kernel was fused
        from (``schema.KERNEL_SOURCES``): rank 0 is the call the kernel is attributed to.

    ``profiling_df()`` and ``function_data`` are the spec's outputs; ``describe()`` the summary;
    ``coverage``, ``unattributed()`` the time the spec leaves out. In a notebook the result shows
    as its summary (``_repr_html_``, rendered by :mod:`aitune_dispatch.reports.html`).
    """

    activity: pa.Table
    ops: pa.Table
    calls: pa.Table
    modules: pa.Table
    module_calls: pa.Table
    function_data: FunctionData
    source: str
    module_objects: tuple[Any, ...] = ()
    dropped_records: int = 0
    warnings: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    kernel_sources: pa.Table = field(default_factory=lambda: schema.empty(schema.KERNEL_SOURCES))

    # -- the spec's views ---------------------------------------------------------------------------
    def attributed(self) -> pa.Table:
        """Activity rows enclosed by both a profiled module and a functional call."""
        return self.activity.filter(attributed_mask(self.activity))

    def profiling_df(self) -> pd.DataFrame:
        """The spec's ``profiling_df``: one row per attributed kernel, the reference's columns."""
        rows = self.attributed()
        module_ids = rows["module_id"].to_numpy().astype(np.int64, copy=False)
        objects = self.module_objects or (None,) * self.modules.num_rows
        return pd.DataFrame(
            {
                "module_name": _string_column(rows["module_name"]),
                "module": _object_column(objects, module_ids),
                "function_name": _string_column(rows["function_name"]),
                "op": _string_column(rows["op"]),
                "kernel": _string_column(rows["kernel"]),
                "kernel_us": rows["kernel_us"].to_numpy().astype(np.float64, copy=False),
            },
            columns=schema.PROFILING_COLUMNS,
        )

    def describe(self, top_k: int = 10) -> pd.DataFrame:
        """The spec's ``describe_results`` for this run."""
        return describe_results(self.profiling_df(), self.function_data, top_k)

    def samples(self) -> pd.DataFrame:
        """Kernel time per distinct input sample: one row per (function, sample) of ``function_data``.

        Returns
        -------
        pandas.DataFrame
            ``function_name, sample, calls, num_modules, kernel_us, kernel_us_per_call,
            time_spent_pct, signature``, most kernel time first. ``sample`` indexes
            ``function_data[function_name]``; ``kernel_us`` counts kernels as ``describe()`` does
            (innermost functional call), so a function's samples add up to its ``time_spent_us``.
            Results saved before calls had a ``sample`` column get NaN kernel times.
        """
        return sample_table(self.activity, self.calls, self.function_data, self.metadata)

    # -- full accounting ------------------------------------------------------------------------------
    @property
    def total_us(self) -> float:
        """Kernel time of every recorded activity row, attributed or not."""
        return float(pc.sum(self.activity["kernel_us"]).as_py() or 0.0)

    @property
    def attributed_us(self) -> float:
        """Kernel time of the rows ``profiling_df()`` reports."""
        return float(pc.sum(self.attributed()["kernel_us"]).as_py() or 0.0)

    @property
    def coverage(self) -> float:
        """Attributed kernel time over all kernel time (NaN when nothing ran)."""
        total = self.total_us
        return self.attributed_us / total if total > 0 else math.nan

    def unattributed(self) -> pd.DataFrame:
        """Kernels missing a module or a functional call, with the op and module that launched them."""
        rows = self.activity.filter(pc.invert(attributed_mask(self.activity)))
        return rows.select(
            ["kernel", "kind", "kernel_us", "op", "module_name", "function_name", "op_id", "start_ns", "stream"]
        ).to_pandas()

    def to_pandas(self) -> pd.DataFrame:
        """Every activity row as a DataFrame (the full, unfiltered view)."""
        return self.activity.to_pandas()

    # -- display --------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        """One line: source, device, rows, distinct kernels, coverage and the top functions."""
        from .views import headline

        head = headline(self)
        device = f", device={head.device}" if head.device else ""
        coverage = "n/a" if math.isnan(head.coverage) else f"{head.coverage:.1%}"
        top = ", ".join(f"{name} {us:,.1f} us" for name, us in head.top_functions) or "none"
        return (
            f"<ProfileResult source={head.source}{device}: {head.activity_rows:,} activity rows, "
            f"{head.kernels:,} distinct kernels, coverage {coverage} of {head.total_us:,.1f} us; top: {top}>"
        )

    def _repr_html_(self) -> str:
        """The summary and coverage as HTML, for notebooks (Jupyter calls this)."""
        from ..reports.html import notebook_html  # rendering lives in reports; imported only when displayed

        return notebook_html(self)

    # -- keep -----------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str], *, with_tensors: bool = False) -> Path:
        """Write this result as Parquet: ``*.parquet`` is one file, any other path a directory.

        Samples keep tensor metadata only unless ``with_tensors=True`` (torch.save of the tensors).
        The layout is documented in :mod:`aitune_dispatch.results.persist`.
        """
        from .persist import save_result

        return save_result(self, path, with_tensors=with_tensors)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, with_tensors: bool = False, map_location: str | None = "cpu"
    ) -> ProfileResult:
        """Read a saved result without torch; ``module_objects`` is empty, samples hold TensorMeta.

        ``with_tensors=True`` (needs torch) restores the saved tensors onto ``map_location``.
        """
        from .persist import load_result

        return load_result(path, with_tensors=with_tensors, map_location=map_location)
