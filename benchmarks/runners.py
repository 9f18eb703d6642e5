"""One timed ``profile()`` per method, split into phases, plus the bare pass it is compared with.

Methods: ``ours-native`` / ``ours-python`` (CUDA, by decoder), ``ours-pytracer`` (CUDA, native
decoder, the pure-Python tracing backend instead of the native one), ``ours``
(defaults, or the CPU source), ``baseline`` (:class:`benchmarks.reference_baseline.ReferenceBaseline`).

Our phases come from the result's ``seconds_*`` metadata (warm-up, start, pass, flush, decode,
join), which the profiler measures itself; whatever else ``profile()`` took is building the
DataFrame. Nothing in the package is patched.
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

from aitune_dispatch.schema import PHASES, seconds_key

from .rss import measure_growth

clock = time.perf_counter
OURS_METHODS = ("ours-native", "ours-python", "ours-pytracer", "ours")
METHODS = (*OURS_METHODS, "baseline")


def sync(device: str) -> None:
    """Wait for the GPU where there is one."""
    if device == "cuda":
        torch.cuda.synchronize()


def timed(run: Callable[[], Any], device: str = "cuda") -> float:
    """Wall seconds of ``run()``, the GPU synchronized before and after (where ``device`` is CUDA)."""
    sync(device)
    started = clock()
    run()
    sync(device)
    return clock() - started


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
    with measure_growth() as growth:
        begin = clock()
        frame, _ = profiler.profile(model, samples, warmup_iterations=warmup)
        end = clock()
    result = profiler.last_result
    out = ours_phases(result.metadata, end - begin)
    out.update(rows=len(frame), kernels=result.activity.num_rows, records=None)
    out.update(rss_mb=growth.peak_mb, rss_retained_mb=growth.retained_mb, peak_reset=growth.peak_reset)
    out.update(source=result.source, dropped_records=result.dropped_records)
    profiler.release()
    return out


def ours_phases(metadata: dict[str, str], profile_s: float) -> dict[str, float]:
    """Phase seconds of one ``profile()`` from its result's ``seconds_*`` metadata; the rest is the DataFrame."""
    phase = {name: float(metadata[seconds_key(name)]) for name in PHASES}
    phases = {
        "warmup_s": phase["warmup"],
        "start_s": phase["start"],
        "pass_s": phase["pass"],
        "stop_s": phase["flush"],
        "decode_s": phase["decode"],
        "join_s": phase["join"],
        "df_s": profile_s - sum(phase.values()),
        "profile_s": profile_s,
    }
    phases["post_s"] = profile_s - phases["warmup_s"] - phases["start_s"] - phases["pass_s"]
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
