"""The pure analyses of a finished result that ``ProfileResult`` and every renderer use.

Pure pandas / Arrow over a result's tables (no torch, no rendering), one concern per module:
:mod:`.accounting` (attributed or not, totals, coverage, the headline, the bar chart's rows),
:mod:`.modules` (layer patterns, labels, the module table and tree), :mod:`.kernels` (the kernel
table), :mod:`.reasons` (what ``profiling_df()`` leaves out, why and what to do) and
:mod:`.timeline` (op times on the host clock) and :mod:`.trace` (the host spans a trace nests on
each thread, and the thread each CUDA launch belongs to). Each function returns a DataFrame, a table or a
small dataclass documented in its docstring; the tables' columns are in ``schema``. Every share is
over **all** kernel time of the run, attributed or not, so the shares of one view add up to 100 %
and agree with every other view.
"""

from ...schema import KERNEL_COLUMNS, MODULE_COLUMNS, UNATTRIBUTED_COLUMNS
from .accounting import (
    BAR_ROWS,
    UNATTRIBUTED,
    Headline,
    ResultTables,
    activity_kinds,
    attributed,
    attributed_mask,
    attributed_us,
    bar_rows,
    coverage,
    headline,
    total_us,
    unattributed,
)
from .kernels import kernel_table
from .modules import layer_pattern, local_name, module_groups, module_label, module_labels, module_table, module_tree
from .reasons import FAST_PATH_OPS, HINTS, REASONS, unattributed_table
from .timeline import op_times
from .trace import call_spans, launch_threads, module_spans, op_spans

__all__ = [
    "BAR_ROWS",
    "FAST_PATH_OPS",
    "HINTS",
    "KERNEL_COLUMNS",
    "MODULE_COLUMNS",
    "REASONS",
    "UNATTRIBUTED",
    "UNATTRIBUTED_COLUMNS",
    "Headline",
    "ResultTables",
    "activity_kinds",
    "attributed",
    "attributed_mask",
    "attributed_us",
    "bar_rows",
    "call_spans",
    "coverage",
    "headline",
    "kernel_table",
    "launch_threads",
    "layer_pattern",
    "local_name",
    "module_groups",
    "module_label",
    "module_labels",
    "module_spans",
    "module_table",
    "module_tree",
    "op_spans",
    "op_times",
    "total_us",
    "unattributed",
    "unattributed_table",
]
