"""Results: the finished run as immutable Arrow tables, with the spec-compatible views.

Importing this package, loading a saved result, describing and comparing need no torch.
"""

from .comparison import compare
from .persist import ResultFormatError, save_result
from .profile_result import ProfileResult
from .rank_views import collectives, compare_ranks, function_ranks, rank_summary
from .ranks import merge, select_rank
from .summary import describe_results, empty_summary, logical_bytes
from .values import OpaqueValue, TensorMeta

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
