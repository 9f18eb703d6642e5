"""Host memory of this process: resident set now and at its peak, from /proc (psutil for RSS when present).

Peak growth of one call is measured by resetting the kernel's high-water mark first
(``echo 5 > /proc/self/clear_refs``, Linux); where that is refused, growth falls back to RSS after
minus RSS before, and :attr:`Growth.peak_reset` says so.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_STATUS = "/proc/self/status"
MB = 1024 * 1024


def _status_kb(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status, or None where there is no /proc."""
    try:
        with open(_STATUS) as status:
            found = re.search(rf"^{field}:\s+(\d+)\s+kB", status.read(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def rss_bytes() -> int:
    """Resident set size now (psutil if installed, else VmRSS; 0 where neither exists)."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        kb = _status_kb("VmRSS")
        return kb * 1024 if kb is not None else 0


def peak_bytes() -> int | None:
    """The resident high-water mark (VmHWM), or None."""
    kb = _status_kb("VmHWM")
    return kb * 1024 if kb is not None else None


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


@dataclass
class Growth:
    """RSS growth of one measured block, in bytes."""

    before: int = 0
    after: int = 0
    peak: int = 0
    peak_reset: bool = False

    @property
    def peak_mb(self) -> float:
        """Peak growth during the block (after - before where the peak could not be reset)."""
        grown = self.peak - self.before if self.peak_reset else self.after - self.before
        return max(grown, 0) / MB

    @property
    def retained_mb(self) -> float:
        """Growth still resident at the end of the block."""
        return (self.after - self.before) / MB


@contextmanager
def measure_growth() -> Iterator[Growth]:
    """Measure the RSS growth of the ``with`` block (garbage collected first)."""
    gc.collect()
    growth = Growth(before=rss_bytes())
    growth.peak_reset = reset_peak()
    try:
        yield growth
    finally:
        growth.after = rss_bytes()
        peak = peak_bytes()
        growth.peak = peak if peak is not None else growth.after
