"""Results: the finished run as immutable Arrow tables, with the spec-compatible views.

Importing this package, loading a saved result, describing and comparing need no torch.
"""

from .comparison import compare
from .persist import ResultFormatError
from .profile_result import ProfileResult, load_result, save_result
from .summary import describe_results, empty_summary, logical_bytes
from .values import OpaqueValue, TensorMeta

load = load_result

__all__ = [
    "OpaqueValue",
    "ProfileResult",
    "ResultFormatError",
    "TensorMeta",
    "compare",
    "describe_results",
    "empty_summary",
    "load",
    "load_result",
    "logical_bytes",
    "save_result",
]
