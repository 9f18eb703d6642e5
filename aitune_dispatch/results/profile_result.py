"""The finished, immutable result of one ``profile()`` run: Arrow tables plus the spec's views.

The analyses are :mod:`.views`, saving and loading :mod:`.persist`; a notebook shows the result
through ``aitune_dispatch.display`` (drawn by the reports stage).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from .. import display, encoded, schema
from ..schema import FunctionData
from . import persist, views

__all__ = ["FunctionData", "ProfileResult"]


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
        ``torch``, ``device``, ``tracer``, ``functions``, phase times (``seconds_*``), clock facts,
        and how compiled kernels and CUDA graph replays were attributed (``schema.META_*``).
    launches:
        The CUDA runtime / driver API calls that launched the activity (``schema.LAUNCHES``:
        ``correlation_id, api, cbid, api_name, start_ns, end_ns, os_thread``; one row per launch,
        copy or set call, sharing ``correlation_id`` with what it launched). Empty for the CPU
        source and for results saved before it existed.
    kernel_sources:
        Every FX source (functional call or other call) each attributed compiled kernel was fused
        from (``schema.KERNEL_SOURCES``): rank 0 is the call the kernel is attributed to. Empty for
        eager runs and for results saved before it existed.

    ``profiling_df()`` and ``function_data`` are the spec's outputs; ``describe()`` the summary;
    ``coverage``, ``unattributed()`` the time the spec leaves out. In a notebook the result shows
    as its summary (``_repr_html_``, rendered by :mod:`aitune_dispatch.reports.html`).

    Every string column of the tables (``kernel``, ``kind``, ``op``, ``module_name``,
    ``function_name``, ``attribution``, ``api``, ...) is dictionary-encoded, ``schema.STRING``
    (``dictionary<int32, string>``: each distinct value once, one dictionary per column), so a
    million kernels hold a few hundred kernel names, not a million; tables given with plain string
    columns (or several dictionaries per column, as concatenation leaves them) are encoded when the
    result is built (:func:`aitune_dispatch.encoded.encoded`). The DataFrames the result returns
    (``profiling_df()``, ``to_pandas()``, ``unattributed()``, ``describe()``, the views) have plain
    string columns, as before.
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
    launches: pa.Table = field(default_factory=lambda: schema.empty(schema.LAUNCHES))
    kernel_sources: pa.Table = field(default_factory=lambda: schema.empty(schema.KERNEL_SOURCES))

    def __post_init__(self) -> None:
        """Dictionary-encode the tables' string columns where they are not (else: one look at each dictionary)."""
        for name in schema.RESULT_TABLES:
            table = getattr(self, name)
            if isinstance(table, pa.Table):
                object.__setattr__(self, name, encoded.encoded(table))

    # -- the spec's views ---------------------------------------------------------------------------
    def attributed(self) -> pa.Table:
        """Activity rows enclosed by both a profiled module and a functional call.

        Returns
        -------
        pyarrow.Table
            The rows of ``activity`` with ``module_id >= 0`` and ``call_id >= 0``, every column.
        """
        return views.attributed(self.activity)

    def profiling_df(self) -> pd.DataFrame:
        """The spec's ``profiling_df``: one row per attributed kernel, the reference's columns.

        String columns are plain strings (the dtype pandas gives Python strings), not Categorical.

        Returns
        -------
        pandas.DataFrame
            Columns ``schema.PROFILING_COLUMNS`` (``module_name, module, function_name, op, kernel,
            kernel_us``); ``module`` is the module object, None for a loaded result.
        """
        return views.profiling_frame(self.activity, self.module_objects or (None,) * self.modules.num_rows)

    def describe(self, top_k: int = 10, *, by: str | None = None) -> pd.DataFrame:
        """The spec's ``describe_results`` for this run; ``by="device"`` or ``"rank"`` splits it.

        Parameters
        ----------
        top_k:
            The most rows (per part when split).
        by:
            None: the spec's summary. ``"device"``: one summary per GPU device, ``"rank"``: one per
            rank of a merged result, stacked under a ``device`` / ``rank`` column
            (:mod:`aitune_dispatch.results.views.split`).

        Returns
        -------
        pandas.DataFrame
            ``schema.SUMMARY_COLUMNS``, after the ``by`` column when split.
        """
        if by is not None:
            return views.describe_by(self, by, top_k)
        return views.describe_results(self.profiling_df(), self.function_data, top_k)

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
        return views.sample_table(self.activity, self.calls, self.function_data, self.metadata)

    # -- full accounting ------------------------------------------------------------------------------
    @property
    def total_us(self) -> float:
        """Kernel time of every recorded activity row, attributed or not."""
        return views.total_us(self.activity)

    @property
    def attributed_us(self) -> float:
        """Kernel time of the rows ``profiling_df()`` reports."""
        return views.attributed_us(self.activity)

    @property
    def coverage(self) -> float:
        """Attributed kernel time over all kernel time (NaN when nothing ran)."""
        return views.coverage(self.activity)

    def unattributed(self) -> pd.DataFrame:
        """Kernels missing a module or a functional call, with the op and module that launched them.

        String columns are plain strings (the dtype pandas gives Python strings), not Categorical.

        Returns
        -------
        pandas.DataFrame
            One row per unattributed activity row: ``kernel, kind, kernel_us, op, module_name,
            function_name, op_id, start_ns, stream`` (null ``op_id``: no op claimed it).
        """
        rows = views.unattributed(self.activity)
        columns = ["kernel", "kind", "kernel_us", "op", "module_name", "function_name", "op_id", "start_ns", "stream"]
        return encoded.decoded(rows.select(columns)).to_pandas()

    def to_pandas(self) -> pd.DataFrame:
        """Every activity row as a DataFrame (the full, unfiltered view).

        String columns are plain strings (the dtype pandas gives Python strings), not the Categorical
        columns that ``result.activity.to_pandas()`` gives (the categorical view, for those who want it).

        Returns
        -------
        pandas.DataFrame
            Every column of ``activity`` (``schema.ACTIVITY``), one row per kernel, copy, set or CPU op.
        """
        return encoded.decoded(self.activity).to_pandas()

    # -- display --------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        """One line: source, device, rows, distinct kernels, coverage and the top functions."""
        head = views.headline(self)
        device = f", device={head.device}" if head.device else ""
        coverage = "n/a" if math.isnan(head.coverage) else f"{head.coverage:.1%}"
        top = ", ".join(f"{name} {us:,.1f} us" for name, us in head.top_functions) or "none"
        return (
            f"<ProfileResult source={head.source}{device}: {head.activity_rows:,} activity rows, "
            f"{head.kernels:,} distinct kernels, coverage {coverage} of {head.total_us:,.1f} us; top: {top}>"
        )

    def _repr_html_(self) -> str:
        """The summary and coverage as HTML, for notebooks (Jupyter calls this; drawn by reports)."""
        return display.notebook_html(self)

    # -- keep -----------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str], *, with_tensors: bool = False) -> Path:
        """Write this result as Parquet: ``*.parquet`` is one file, any other path a directory.

        Samples keep tensor metadata only unless ``with_tensors=True`` (torch.save of the tensors).
        The layout is documented in :mod:`aitune_dispatch.results.persist`.

        Parameters
        ----------
        path:
            ``*.parquet``: one file; any other path: a directory (replaced if it holds a result).
            Written beside ``path`` and put there when complete: a failed save (``OSError``, e.g. a
            full disk) leaves the previous result as it was and nothing else behind.
        with_tensors:
            Also keep the sample tensors (needs torch; ``tensors.pt`` or a row of the file).

        Returns
        -------
        pathlib.Path
            The path written.
        """
        return persist.save_result(self, path, with_tensors=with_tensors)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, with_tensors: bool = False, map_location: str | None = "cpu"
    ) -> ProfileResult:
        """Read a saved result without torch; ``module_objects`` is empty, samples hold TensorMeta.

        The one load (:func:`aitune_dispatch.results.persist.load_result`); ``aitune_dispatch.load``
        is this method. ``with_tensors=True`` (needs torch) restores the saved tensors onto
        ``map_location``. A directory of per-rank results loads as their merge.

        Parameters
        ----------
        path:
            A saved result (directory or ``*.parquet`` file), or a directory of per-rank results.
        with_tensors:
            Restore the saved sample tensors (needs torch and a result saved ``with_tensors=True``).
        map_location:
            Where the tensors go (``torch.load``'s ``map_location``); None: the devices they were saved from.

        Returns
        -------
        ProfileResult
            The result, its string columns dictionary-encoded as in memory.

        Raises
        ------
        FileNotFoundError, ResultFormatError
            No saved result at ``path`` nor inside it; a damaged or foreign one, or one saved by a
            newer version (the message names the file, what is wrong and what to do).
        """
        return persist.load_result(cls, path, with_tensors=with_tensors, map_location=map_location)
