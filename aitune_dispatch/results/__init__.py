"""Results: the finished run as an immutable ``ProfileResult`` of Arrow tables, its views and its
persistence; importing, loading, describing and comparing need no torch (``docs/design.md``,
"Layout")."""

from .persist import ResultFormatError, save_result
from .profile_result import ProfileResult
from .values import OpaqueValue, TensorMeta
from .views import (
    collectives,
    compare,
    compare_ranks,
    describe_results,
    function_ranks,
    merge,
    rank_summary,
    select_rank,
)
from .views.summary import empty_summary, logical_bytes

load = ProfileResult.load  # the one load: a saved result, or a directory of per-rank results merged

__all__ = [
    "OpaqueValue",
    "ProfileResult",
    "ResultFormatError",
    "TensorMeta",
    "collectives",
    "compare",
    "compare_ranks",
    "describe_results",
    "empty_summary",
    "function_ranks",
    "load",
    "logical_bytes",
    "merge",
    "rank_summary",
    "save_result",
    "select_rank",
]
