"""What HolisticTraceAnalysis's default timestamp rounding takes from a trace: ours and Kineto's.

    python -m benchmarks.hta_rounding --out OUT [--device cuda] [--passes 3]

HTA (``hta.common.trace_parser.round_down_time_stamps``) rounds every float ``ts`` up and every end
(``ts + dur``) down to whole microseconds unless ``HTA_DISABLE_NS_ROUNDING=1``, so an event shorter
than a microsecond, or one straddling a microsecond boundary, loses up to 2 µs and can end before
it starts. Both traces write float microseconds with nanosecond decimals (Kineto since
pytorch/pytorch#122425), so both lose alike. This script runs the demo model once under our
profiler and once under ``torch.profiler`` in the same process, writes both traces, and reports,
for the device's events (GPU kernels, copies and sets; ``cpu_op`` on the CPU), the exact sum of
``dur``, the sum after HTA's rule (what HTA's per-kernel breakdown adds up), and how many events
end up with a duration <= 0. The rule is
applied here as HTA applies it (this machine need not have HTA); ``tests/test_trace_hta.py`` checks
on CPU that HTA's own loader gives the same sums. Writes ``hta_rounding.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def hta_rounded(ts: float, dur: float) -> float:
    """An event's duration after HTA's default rounding: start up, end down, to whole µs."""
    return float(math.floor(ts + dur) - math.ceil(ts))


def device_events(trace: dict[str, Any], cats: Iterable[str]) -> list[dict[str, Any]]:
    """The complete (``ph: X``) events of ``cats`` in a Chrome trace."""
    wanted = set(cats)
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in wanted]


def rounding_row(name: str, events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Exact and HTA-rounded sums of ``events``' durations, and the events rounded to <= 0."""
    exact = sum(float(e["dur"]) for e in events)
    rounded = [hta_rounded(float(e["ts"]), float(e["dur"])) for e in events]
    kept = sum(rounded)  # HTA's per-kernel breakdown sums them, the negative ones included
    return {
        "trace": name,
        "events": len(events),
        "exact_us": exact,
        "hta_default_us": kept,
        "lost_share": (exact - kept) / exact if exact > 0 else 0.0,
        "not_positive": sum(d <= 0 for d in rounded),
        "fractional_ts": sum(float(e["ts"]) != int(float(e["ts"])) for e in events),
    }


def _ours(model: Any, samples: Any, device: str, out: Path) -> dict[str, Any]:
    from aitune_dispatch import ModuleFunctionKernelProfiler
    from aitune_dispatch.reports import write_perfetto

    result = ModuleFunctionKernelProfiler(device=device).profile_result(model, samples, warmup_iterations=1)
    path = write_perfetto(result, out / "ours.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _kineto(model: Any, samples: Any, device: str, out: Path) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.no_grad():
        for args, kwargs in samples:  # the same warm-up as ours
            model(*args, **kwargs)
        with profile(activities=activities) as prof:
            for args, kwargs in samples:
                model(*args, **kwargs)
            if device == "cuda":
                torch.cuda.synchronize()
    path = out / "kineto.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text(encoding="utf-8"))


def measure(device: str, out: Path) -> list[dict[str, Any]]:
    """One pass of the demo model under each profiler; the rounding rows of both traces."""
    import torch

    from aitune_dispatch.demo import demo_workload

    torch.manual_seed(0)
    model, samples = demo_workload(device)
    cats = GPU_CATS if device == "cuda" else ("cpu_op",)
    rows = [rounding_row("aitune_dispatch", device_events(_ours(model, samples, device, out), cats))]
    rows.append(rounding_row("torch.profiler (Kineto)", device_events(_kineto(model, samples, device, out), cats)))
    return rows


def render(rows: Sequence[dict[str, Any]], device: str, passes: list[list[dict[str, Any]]]) -> str:
    """The markdown report: one table of the last pass, and the spread of the lost share over passes."""
    import torch

    lines = [
        "# HTA's default rounding on our trace and on Kineto's",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; python {platform.python_version()}, torch "
        f"{torch.__version__}, device {device}"
        + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else "")
        + "; the demo model, one recorded pass per profiler per run.",
        "",
        "| trace | events | exact µs | HTA default µs | lost | events <= 0 µs | fractional ts |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['trace']} | {row['events']} | {row['exact_us']:.3f} | {row['hta_default_us']:.3f} | "
            f"{100 * row['lost_share']:.1f} % | {row['not_positive']} | {row['fractional_ts']} |"
        )
    for name in (rows[0]["trace"], rows[1]["trace"]):
        shares = sorted(100 * run[i]["lost_share"] for run in passes for i in range(2) if run[i]["trace"] == name)
        lines.append(f"\n{name}: lost share over {len(shares)} runs, min {shares[0]:.1f} %, max {shares[-1]:.1f} %")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default=None, help="cuda where available, else cpu")
    parser.add_argument("--passes", type=int, default=3, help="runs of both profilers (default: 3)")
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    passes = [measure(device, args.out) for _ in range(max(1, args.passes))]
    text = render(passes[-1], device, passes)
    (args.out / "hta_rounding.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
