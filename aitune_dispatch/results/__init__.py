"""Results: the finished run as immutable Arrow tables, with the spec-compatible views."""

from .profile_result import ProfileResult
from .summary import describe_results, empty_summary, logical_bytes

__all__ = ["ProfileResult", "describe_results", "empty_summary", "logical_bytes"]
