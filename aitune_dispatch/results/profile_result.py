"""The immutable result of one ``profile()`` run: its Arrow tables, with methods that call the views
and persist, so a live and a loaded result answer alike (``docs/design.md``, "Layout")."""

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
    """Everything one run recorded, attributed or not; ``profile_result()`` returns one.

    String columns are dictionary-encoded when the result is built; the DataFrames it returns hold
    plain strings (``docs/design.md``, "Strings in memory").

    Attributes
    ----------
    activity:
        One row per kernel, copy, set or CPU op with its op, module and innermost functional call
        (``schema.ACTIVITY``).
    ops, calls, modules, module_calls:
        The trace (``schema.OPS``, ``CALLS``, ``MODULES``, ``MODULE_CALLS``).
    function_data:
        The spec's ``function_data``: ``function_name -> [(count, (args, kwargs)), ...]``.
    source:
        ``cupti/native``, ``cupti/python`` or ``cpu``.
    module_objects:
        The profiled ``nn.Module`` objects by ``module_id`` (empty for a loaded result).
    dropped_records:
        Activity records CUPTI dropped.
    warnings:
        Problems of the run, in words.
    metadata:
        Versions, phase times, clock facts and attribution modes (``schema.META_*``).
    launches:
        The CUDA API calls that launched the activity (``schema.LAUNCHES``); empty for the CPU
        source and older saves.
    kernel_sources:
        Every FX source each compiled kernel was fused from, rank 0 the one it is attributed to
        (``schema.KERNEL_SOURCES``); empty for eager runs and older saves.
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
        """Dictionary-encode the tables' string columns where they are not."""
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
            The rows of ``activity`` with ``module_id >= 0`` and ``call_id >= 0``.
        """
        return views.attributed(self.activity)

    def profiling_df(self) -> pd.DataFrame:
        """The spec's ``profiling_df``: one row per attributed kernel, plain string columns.

        Returns
        -------
        pandas.DataFrame
            ``schema.PROFILING_COLUMNS``; ``module`` is the module object, None for a loaded result.
        """
        return views.profiling_frame(self.activity, self.module_objects or (None,) * self.modules.num_rows)

    def steps(self, by: str = "kernel") -> pd.DataFrame:
        """Time per recorded step (``recording(...).step()``): per kernel, ``function_name``, ``module_name``
        or ``op``, the steps that ran it, its activity rows per step and the median, min, max and
        spread of its per-step time (``views.step_table``). A result without steps is one step.

        Parameters
        ----------
        by:
            ``"kernel"`` (default), ``"function_name"``, ``"module_name"`` or ``"op"``.

        Returns
        -------
        pandas.DataFrame
            ``by`` then ``views.STEP_COLUMNS``, most total time first.
        """
        return views.step_table(self, by)

    def describe(self, top_k: int | None = 10, *, by: str | None = None, roofline: bool = False) -> pd.DataFrame:
        """The spec's ``describe_results`` for this run; ``by="device"`` or ``"rank"`` splits it.

        Parameters
        ----------
        top_k:
            The most rows (per part when split): a positive integer; None keeps every function.
        by:
            None: the spec's summary; ``"device"`` or ``"rank"``: one summary per part, stacked
            under that column.
        roofline:
            Add ``schema.ROOFLINE_COLUMNS`` per function, over its samples (``samples(roofline=True)``).

        Returns
        -------
        pandas.DataFrame
            ``schema.SUMMARY_COLUMNS`` (after the ``by`` column when split), then the roofline
            columns where asked.

        Raises
        ------
        ValueError
            ``roofline`` together with ``by``, or a ``top_k`` that is neither None nor a positive integer.
        """
        top_k = views.check_top(top_k, "top_k")  # before any work
        if by is not None:
            if roofline:
                raise ValueError("describe(roofline=True) is per function over the whole run; leave by=None")
            return views.describe_by(self, by, top_k)
        summary = views.describe_results(self.profiling_df(), self.function_data, top_k)
        return views.roofline_functions(summary, self.samples(roofline=True)) if roofline else summary

    def samples(self, *, roofline: bool = False) -> pd.DataFrame:
        """Kernel time per distinct input sample of ``function_data``.

        Parameters
        ----------
        roofline:
            Add ``schema.ROOFLINE_COLUMNS``: the calls' FLOPs (torch's formulas, on meta tensors of
            the samples' shapes) and bytes (a lower bound), the rates reached, the GPU's limits and
            the time they say could be saved (``docs/api.md``, "Worth optimizing"). Needs torch.

        Returns
        -------
        pandas.DataFrame
            One row per (function, sample), most kernel time first; a function's samples add up to
            its ``describe()`` time.
        """
        table = views.sample_table(self.activity, self.calls, self.function_data)
        if not roofline:
            return table
        from . import work

        return views.roofline_samples(table, work.sample_work(self.function_data), self.metadata)

    def module_roofline(self) -> pd.DataFrame:
        """The sampled calls' roofline per module pattern they ran directly in (``views.roofline_modules``).

        Returns
        -------
        pandas.DataFrame
            ``views.MODULE_ROOFLINE_COLUMNS``, most ``worth_us`` first.
        """
        return views.roofline_modules(self, self.samples(roofline=True))

    def worth_optimizing(self, top: int | None = 10) -> pd.DataFrame:
        """The sampled calls ranked by the time the GPU's limits say could be saved.

        Parameters
        ----------
        top:
            The most rows (a positive integer); None keeps all.

        Returns
        -------
        pandas.DataFrame
            ``views.WORTH_COLUMNS``, largest ``worth_us`` first (``kernel_us x (1 - fraction_of_bound)``).

        Raises
        ------
        ValueError
            ``top`` is neither None nor a positive integer.
        """
        top = views.check_top(top)  # before the samples' work is counted
        return views.worth_optimizing(self.samples(roofline=True), top)

    def kernel_rollup(self, top: int | None = None) -> pd.DataFrame:
        """Every launch of each kernel name added up, largest total first (``views.kernel_rollup``).

        Parameters
        ----------
        top:
            Keep only the first ``top`` rows (a positive integer); None keeps all.

        Returns
        -------
        pandas.DataFrame
            ``kernel, kind, count, total_us, mean_us, min_us, max_us, share``.

        Raises
        ------
        ValueError
            ``top`` is neither None nor a positive integer.
        """
        return views.kernel_rollup(self, top)

    def device_busy(self) -> pd.DataFrame:
        """How long each device and stream was busy during the profiled passes (``views.device_busy``).

        Returns
        -------
        pandas.DataFrame
            ``device, stream, wall_us, busy_us, busy_share, idle_us, launches``; ``stream`` missing
            on the row of the device over all its streams.
        """
        return views.device_busy(self)

    def graph_replays(self) -> pd.DataFrame:
        """Per CUDA graph the passes replayed: replays, kernels, time, and how much was attributed.

        Returns
        -------
        pandas.DataFrame
            ``graph_id, replays, kernels, kernels_per_replay, total_us, share, attributed``, most
            time first (``views.graph_replays``); empty where nothing was replayed.
        """
        return views.graph_replays(self)

    def idle_gaps(self, min_gap_us: float = 5.0, top: int | None = None) -> pd.DataFrame:
        """The stretches of the passes in which a device ran nothing, and the modules the host ran then.

        Parameters
        ----------
        min_gap_us:
            Leave out gaps shorter than this (µs).
        top:
            Keep only the ``top`` longest (a positive integer); None keeps all.

        Returns
        -------
        pandas.DataFrame
            ``device, sample, start_us, end_us, gap_us, modules`` (``views.idle_gaps``).

        Raises
        ------
        ValueError
            ``top`` is neither None nor a positive integer.
        """
        return views.idle_gaps(self, min_gap_us, top)

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

        Returns
        -------
        pandas.DataFrame
            One row per unattributed activity row, plain string columns (null ``op_id``: no op
            claimed it).
        """
        rows = views.unattributed(self.activity)
        columns = ["kernel", "kind", "kernel_us", "op", "module_name", "function_name", "op_id", "start_ns", "stream"]
        return encoded.decoded(rows.select(columns)).to_pandas()

    def to_pandas(self) -> pd.DataFrame:
        """Every activity row as a DataFrame with plain string columns.

        ``result.activity.to_pandas()`` gives the Categorical view instead.

        Returns
        -------
        pandas.DataFrame
            Every column of ``activity`` (``schema.ACTIVITY``).
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
        """The summary and coverage as HTML, for notebooks."""
        return display.notebook_html(self)

    # -- keep -----------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str], *, with_tensors: bool = False) -> Path:
        """Write this result as Parquet; a failed save leaves the previous one as it was.

        Parameters
        ----------
        path:
            ``*.parquet``: one file; any other path: a directory (replaced if it holds a result). A
            symlink is followed: the file or directory it names is replaced, the link kept.
        with_tensors:
            Also keep the sample tensors (needs torch); else samples keep tensor metadata only.

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

        ``aitune_dispatch.load`` is this method; a directory of per-rank results loads as their merge.

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
            No saved result at ``path``; a damaged or foreign one, or one saved by a newer version.
        """
        return persist.load_result(cls, path, with_tensors=with_tensors, map_location=map_location)
