"""One timed ``profile()`` per method, split into phases, plus the bare pass it is compared with.

Methods: ``ours-native`` / ``ours-python`` (CUDA, by decoder), ``ours-pytracer`` (CUDA, native
decoder, ops recorded by the Python TorchDispatchMode instead of the native op tracer), ``ours``
(defaults, or the CPU source), ``baseline`` (:class:`benchmarks.reference_baseline.ReferenceBaseline`).

Our phases are measured from outside the package, on the profiler *instance* only: its activity
source is wrapped in :class:`TimedSource` (``start`` / ``stop`` / ``activity`` timed; the per-op
callbacks are the source's own, so the hot path is untouched) and ``_record`` is timed to split
joining from building the DataFrame. Nothing in the package is patched globally.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .rss import measure_growth

clock = time.perf_counter
OURS_METHODS = ("ours-native", "ours-python", "ours-pytracer", "ours")
METHODS = (*OURS_METHODS, "baseline")


def sync(device: str) -> None:
    """Wait for the GPU where there is one."""
    if device == "cuda":
        torch.cuda.synchronize()


def run_pass(model: Callable[..., Any], samples: Sequence[Any]) -> None:
    """One pass over the samples, as ``profile()`` runs it."""
    for args, kwargs in samples:
        model(*args, **kwargs)


def bare_pass_s(model: Callable[..., Any], samples: Sequence[Any], device: str) -> float:
    """Median wall time of an uninstrumented pass (one warm pass first; 3 timed if short)."""
    times: list[float] = []
    with torch.no_grad():
        for index in range(4):
            sync(device)
            started = clock()
            run_pass(model, samples)
            sync(device)
            if index:
                times.append(clock() - started)
            if index == 1 and times[0] > 0.3:
                break
    return statistics.median(times)


class TimedSource:
    """Wraps an activity source and notes when ``start``, ``stop`` and ``activity`` begin and end."""

    def __init__(self, inner: Any, marks: dict[str, float], counts: dict[str, int]) -> None:
        self._inner, self._marks, self._counts = inner, marks, counts
        self.name = inner.name
        self.op_started = inner.op_started  # the source's own callbacks: nothing added per op
        self.op_finished = inner.op_finished
        sink = getattr(inner, "_sink", None)
        if sink is not None and hasattr(sink, "take"):
            take = sink.take

            def counted_take() -> Any:
                records = take()
                counts["records"] = int(getattr(records, "records", 0))
                return records

            try:
                sink.take = counted_take
            except AttributeError:  # a sink with __slots__: no record count, nothing else changes
                pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _timed(self, phase: str, call: Callable[[], Any]) -> Any:
        self._marks[f"{phase}0"] = clock()
        try:
            return call()
        finally:
            self._marks[f"{phase}1"] = clock()

    def start(self) -> None:
        """Timed ``start``."""
        self._timed("start", self._inner.start)

    def stop(self) -> None:
        """Timed ``stop`` (forced flush; the native decoder decodes here)."""
        self._timed("stop", self._inner.stop)

    def activity(self) -> Any:
        """Timed ``activity`` (the cupti-python decoder decodes here)."""
        return self._timed("activity", self._inner.activity)


def make_profiler(method: str, device: str) -> Any:
    """The profiler object of ``method``."""
    if method == "baseline":
        from .reference_baseline import ReferenceBaseline

        return ReferenceBaseline(device=device)
    from aitune_dispatch import ModuleFunctionKernelProfiler

    decoder = {"ours-native": "native", "ours-python": "python", "ours-pytracer": "native"}.get(method)
    if decoder is not None and device != "cuda":
        raise ValueError(f"{method} needs CUDA; use method 'ours' on the CPU")
    tracer = "python" if method == "ours-pytracer" else None
    return ModuleFunctionKernelProfiler(device=device, decoder=decoder, op_tracer=tracer)


def measure(method: str, profiler: Any, model: Any, samples: Sequence[Any], warmup: int) -> dict[str, Any]:
    """One timed ``profile()`` with its phases (seconds), rows, kernels and RSS growth (MB)."""
    if method == "baseline":
        return _measure_baseline(profiler, model, samples, warmup)
    return _measure_ours(profiler, model, samples, warmup)


def _measure_ours(profiler: Any, model: Any, samples: Sequence[Any], warmup: int) -> dict[str, Any]:
    marks: dict[str, float] = {}
    counts: dict[str, int] = {}
    make_source, record = profiler._make_source, profiler._record

    def timed_record(*args: Any, **kwargs: Any) -> Any:
        result = record(*args, **kwargs)
        marks["recorded"] = clock()
        return result

    profiler._make_source = lambda: TimedSource(make_source(), marks, counts)
    profiler._record = timed_record
    try:
        with measure_growth() as growth:
            begin = clock()
            frame, _ = profiler.profile(model, samples, warmup_iterations=warmup)
            end = clock()
    finally:
        del profiler._make_source, profiler._record
    result = profiler.last_result
    out = _ours_phases(marks, begin, end)
    out.update(rows=len(frame), kernels=result.activity.num_rows, records=counts.get("records"))
    out.update(rss_mb=growth.peak_mb, rss_retained_mb=growth.retained_mb, peak_reset=growth.peak_reset)
    out.update(source=result.source, dropped_records=result.dropped_records)
    profiler.release()
    return out


def _ours_phases(marks: dict[str, float], begin: float, end: float) -> dict[str, float]:
    phases = {
        "warmup_s": marks["start0"] - begin,
        "start_s": marks["start1"] - marks["start0"],
        "pass_s": marks["stop0"] - marks["start1"],
        "stop_s": marks["stop1"] - marks["stop0"],
        "decode_s": marks["activity1"] - marks["activity0"],
        "join_s": marks["recorded"] - marks["activity1"],
        "df_s": end - marks["recorded"],
        "post_s": end - marks["stop0"],
        "profile_s": end - begin,
    }
    phases["flush_decode_s"] = phases["stop_s"] + phases["decode_s"]
    return phases


def _measure_baseline(profiler: Any, model: Any, samples: Sequence[Any], warmup: int) -> dict[str, Any]:
    with measure_growth() as growth:
        begin = clock()
        frame, _ = profiler.profile(model, samples, warmup_iterations=warmup)
        end = clock()
    out: dict[str, Any] = dict(profiler.timings)
    out.update(profile_s=end - begin, rows=len(frame), kernels=profiler.kernels_seen, records=None)
    out.update(flush_decode_s=out["stop_s"] + out["parse_s"])
    out.update(rss_mb=growth.peak_mb, rss_retained_mb=growth.retained_mb, peak_reset=growth.peak_reset)
    del frame
    return out


def python_profile(call: Callable[[], Any], top: int) -> str:
    """cProfile of ``call``: the ``top`` functions by cumulative and by own time."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        call()
    finally:
        profile.disable()
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return text.getvalue()
