"""The views: every pure analysis of a finished result, one concern per module, used by
``ProfileResult`` and every renderer. They read a result by its fields and never import
``ProfileResult``, which imports them; every share is over all kernel time of the run, so the views
add up to 100 % and agree (``docs/design.md``, "Layout")."""

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
from .comparison import compare
from .gpu_time import BUSY_COLUMNS, GAP_COLUMNS, device_busy, idle_gaps, pass_windows
from .graph_replays import GRAPH_REPLAY_COLUMNS, graph_replays
from .kernel_names import short_name, short_names
from .kernels import kernel_table
from .modules import layer_pattern, local_name, module_groups, module_label, module_labels, module_table, module_tree
from .origins import ORIGIN_COLUMNS, kernel_origins
from .ranks import collectives, compare_ranks, function_ranks, merge, rank_summary, select_rank
from .reasons import FAST_PATH_OPS, HINTS, REASONS, empty_result_warning, unattributed_table
from .rollup import ROLLUP_COLUMNS, kernel_rollup
from .roofline import (
    MODULE_ROOFLINE_COLUMNS,
    WORTH_COLUMNS,
    device_limits,
    roofline_functions,
    roofline_modules,
    roofline_samples,
    worth_optimizing,
)
from .samples import sample_table
from .split import describe_by
from .steps import STEP_COLUMNS, row_steps, step_bounds, step_table
from .summary import describe_results, profiling_frame
from .timeline import op_times
from .top import check_top, first_rows
from .trace import call_spans, launch_threads, module_spans, op_spans

__all__ = [
    "BAR_ROWS",
    "BUSY_COLUMNS",
    "GAP_COLUMNS",
    "GRAPH_REPLAY_COLUMNS",
    "MODULE_ROOFLINE_COLUMNS",
    "ORIGIN_COLUMNS",
    "ROLLUP_COLUMNS",
    "STEP_COLUMNS",
    "WORTH_COLUMNS",
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
    "check_top",
    "collectives",
    "compare",
    "compare_ranks",
    "coverage",
    "describe_by",
    "describe_results",
    "device_busy",
    "first_rows",
    "graph_replays",
    "device_limits",
    "empty_result_warning",
    "function_ranks",
    "headline",
    "roofline_functions",
    "roofline_modules",
    "roofline_samples",
    "idle_gaps",
    "kernel_origins",
    "kernel_rollup",
    "kernel_table",
    "launch_threads",
    "layer_pattern",
    "local_name",
    "merge",
    "module_groups",
    "module_label",
    "module_labels",
    "module_spans",
    "module_table",
    "module_tree",
    "op_spans",
    "op_times",
    "pass_windows",
    "profiling_frame",
    "rank_summary",
    "sample_table",
    "short_name",
    "short_names",
    "select_rank",
    "total_us",
    "unattributed",
    "unattributed_table",
    "worth_optimizing",
    "row_steps",
    "step_bounds",
    "step_table",
]
