"""One harness worker: one zoo model, one method, the sample list at growing repeats, in one process.

``python -m benchmarks.worker SPEC.json`` (what the harness starts, one fresh process per worker so
that start-up and host memory of one method never pollute another) writes its result as JSON to
``spec["result"]``. The first ``profile()`` is the start-up call; every measured call is a later one.
A repeat is skipped when the previous call, scaled linearly, would pass ``call_cap_s`` or the
worker's deadline.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import runners, zoo

CALLS_PER_REPEAT = 3  # profile() calls per configuration; the median one is reported
MEDIAN_CAP_S = 6.0  # ...unless that many calls would take longer than this


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the worker described by ``spec``; never raises (errors are in the result)."""
    out: dict[str, Any] = {"model": spec["model"], "method": spec["method"], "runs": [], "skipped": []}
    try:
        out.update(_run(spec, out))
    except zoo.ModelUnavailable as error:
        out.update(status="skipped", reason=str(error))
    except Exception as error:  # noqa: BLE001 - a failed worker is reported, the harness goes on
        out.update(status="error", reason=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
    return out


def _run(spec: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    device, method, warmup = spec["device"], spec["method"], spec["warmup"]
    base = zoo.build(spec["model"], device, 1, size=spec["size"])
    profiler = runners.make_profiler(method, device)
    started = runners.clock()
    try:
        runners.measure(method, profiler, base.model, base.samples, warmup)
    except RuntimeError as error:
        if method == "ours-native" and "native" in str(error):
            return {"status": "skipped", "reason": str(error)}
        raise
    out["startup_s"] = runners.clock() - started
    last: tuple[int, float] | None = None
    for repeat in spec["repeats"]:
        reason = _skip_reason(spec, repeat, last)
        if reason:
            out["skipped"].append({"repeat": repeat, "reason": reason})
            continue
        run = _one_repeat(spec, profiler, zoo.repeated(base, repeat), repeat)
        out["runs"].append(run)
        last = (repeat, run["profile_s"] + run["bare_pass_s"] * 4)
    if spec.get("cprofile_top") and out["runs"]:
        if last is not None and time.time() + last[1] * 2 < spec["deadline"]:  # cProfile slows Python down
            out["cprofile"] = _cprofile(spec, profiler, base, out["runs"][-1]["repeat"])
        else:
            out["skipped"].append({"repeat": out["runs"][-1]["repeat"], "reason": "cProfile: no time left"})
    return {"status": "ok"}


def _skip_reason(spec: dict[str, Any], repeat: int, last: tuple[int, float] | None) -> str | None:
    """Why ``repeat`` is skipped (predicted from the previous repeat), or None."""
    if last is None:
        return None
    predicted = last[1] * repeat / last[0]
    if predicted > spec["call_cap_s"]:
        return f"predicted {predicted:.0f} s > call cap {spec['call_cap_s']:.0f} s"
    if time.time() + predicted > spec["deadline"]:
        return f"predicted {predicted:.0f} s would pass the worker's time budget"
    return None


def _one_repeat(spec: dict[str, Any], profiler: Any, workload: zoo.Workload, repeat: int) -> dict[str, Any]:
    """The median of up to ``CALLS_PER_REPEAT`` calls (fewer where one call is long), bare pass beside each."""
    calls, bares = [], []
    while len(calls) < CALLS_PER_REPEAT:
        bares.append(runners.bare_pass_s(workload.model, workload.samples, spec["device"]))
        calls.append(runners.measure(spec["method"], profiler, workload.model, workload.samples, spec["warmup"]))
        if (
            calls[0]["profile_s"] * CALLS_PER_REPEAT > MEDIAN_CAP_S
            or time.time() + calls[0]["profile_s"] > spec["deadline"]
        ):
            break
    run = sorted(calls, key=lambda call: call["profile_s"])[len(calls) // 2]
    bare = statistics.median(bares)
    pass_ratio = statistics.median(call["pass_s"] for call in calls) / bare
    run.update(repeat=repeat, samples=len(workload.samples), bare_pass_s=bare, pass_ratio=pass_ratio, calls=len(calls))
    kernels = max(run["kernels"], 1)
    run.update(
        post_us_per_kernel=run["post_s"] / kernels * 1e6,
        flush_decode_us_per_kernel=run["flush_decode_s"] / kernels * 1e6,
    )
    run.update(profile_ms_per_row=run["profile_s"] / max(run["rows"], 1) * 1e3)
    return run


def _cprofile(spec: dict[str, Any], profiler: Any, base: zoo.Workload, repeat: int) -> str:
    """cProfile text of one more call at ``repeat``, saved beside the result; returns the file name."""
    workload = zoo.repeated(base, repeat)
    text = runners.python_profile(
        lambda: profiler.profile(workload.model, workload.samples, warmup_iterations=spec["warmup"]),
        spec["cprofile_top"],
    )
    if hasattr(profiler, "release"):
        profiler.release()
    path = Path(spec["result"]).with_name(f"cprofile_{spec['model']}_{spec['method']}_x{repeat}.txt")
    path.write_text(text)
    return path.name


def main(argv: list[str] | None = None) -> int:
    """Run the worker whose spec is the JSON file named by the single argument."""
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text())
    result = run(spec)
    Path(spec["result"]).write_text(json.dumps(result, indent=1, default=str))
    return 0 if result.get("status") in ("ok", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
