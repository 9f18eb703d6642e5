"""The recorded pass over the bare pass, per mechanism and per profiler, and the 10^6-kernel run.

    python -m benchmarks.pass_ratio --out OUT [--models ...] [--passes 3] [--million]

For each zoo model (bench size, one pass = the model's base samples, or one ``generate()`` for
``llama_generate``) and each configuration, the recorded pass alone (no warm-up, no
post-processing) is timed ``--passes`` times, each time beside a bare pass in the same process;
the ratio is the median pass over the median bare pass, and the spread is the range of the
per-pair ratios. Configurations: an empty ``TorchFunctionMode``; ``torch.profiler`` (CPU + CUDA
activities); the AITune-style baseline (``reference_baseline.py``); ours (``profile()``'s
``seconds_pass``); ours with ``function_names=set()`` (no sample keys); and, to show where our
pass goes, two no-op global module hooks, our CUPTI source alone (no tracing), our tracing alone
(no CUPTI) and everything but the correlation-id pushes. ``profile()`` wall time (ours and the
baseline's, warm-up 0) comes from the same calls. Each model runs in a process of its own, and
torch.profiler and the baseline (which runs torch.profiler) come after every other configuration:
Kineto keeps CUPTI's callback subscription once it has run, and ours would then fall back to pushed ids.

``--million`` adds ``llama_generate`` with 40 ``generate()`` calls in one ``profile()`` (about
10^6 kernels): bare seconds, ``profile()`` seconds, host memory growth and post-processing per
kernel. Writes ``pass_ratio.md`` and ``pass_ratio.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from aitune_dispatch.schema import seconds_key

from . import zoo
from .apart import measure_apart, write_one
from .rss import measure_growth
from .runners import timed

MODELS = ("mlp", "resnet50", "mha_blocks", "sdpa_blocks", "vit_b_16", "gpt2", "llama_generate", "unet_sd15")
CONFIGS = ("empty function mode", "torch.profiler", "baseline", "ours", "ours, samples off")
MECHANISMS = ("no-op global hooks", "cupti only", "tracing only", "ours without pushes")
COLUMNS = (
    "| model | kernels | bare pass s | empty function mode / bare | torch.profiler / bare | baseline / bare "
    "| ours / bare | ours, samples off / bare |"
)
BASELINE_CAP_S = 20.0  # the baseline's post-processing is ~1 ms per row: one measured call past this


class EmptyMode(TorchFunctionMode):
    """The cost of any TorchFunctionMode: forwards every call."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))



def _profile_args(work: zoo.Workload) -> tuple[Any, Any, dict[str, Any]]:
    if work.function is not None:
        return work.function, None, {"module": work.model}
    return work.model, work.samples, {}


class Configs:
    """One recorded pass of each configuration, returning its seconds (and kernels for ours)."""

    def __init__(self, work: zoo.Workload) -> None:
        from aitune_dispatch import ModuleFunctionKernelProfiler

        from .reference_baseline import ReferenceBaseline

        self.work = work
        self.ours = ModuleFunctionKernelProfiler()
        self.ours_off = ModuleFunctionKernelProfiler(function_names=set())
        self.baseline = ReferenceBaseline(device="cuda")
        self.kernels = 0
        self.baseline_call_s = 0.0
        self.baseline_calls = 0
        self.profile_s: dict[str, list[float]] = {"ours": [], "baseline": []}

    def pass_s(self, config: str) -> float | None:
        work = self.work
        if config in MECHANISMS:
            return timed(lambda: self.mechanism(config))
        if config == "empty function mode":

            def under_mode() -> None:
                with EmptyMode():
                    work.run()

            return timed(under_mode)
        if config == "torch.profiler":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                seconds = timed(work.run)
            return seconds
        function, data, kwargs = _profile_args(work)
        if config == "baseline":
            if self.baseline_call_s > BASELINE_CAP_S and self.baseline_calls > 1:
                return None
            started = time.perf_counter()
            self.baseline.profile(function, data, warmup_iterations=0, **kwargs)
            self.baseline_call_s = time.perf_counter() - started
            self.baseline_calls += 1
            self.profile_s["baseline"].append(self.baseline_call_s)
            return float(self.baseline.timings["pass_s"])
        profiler = self.ours if config == "ours" else self.ours_off
        started = time.perf_counter()
        result = profiler.profile_result(function, data, warmup_iterations=0, **kwargs)
        result.profiling_df()
        if config == "ours":
            self.kernels = result.activity.num_rows
            self.profile_s["ours"].append(time.perf_counter() - started)
        seconds = float(result.metadata[seconds_key("pass")])
        profiler.release()
        return seconds

    def mechanism(self, config: str) -> None:
        """One pass under one mechanism of ours (or no-op hooks), as ``pass_breakdown`` defines them."""
        from aitune_dispatch.collection import CpuOpTimer

        from .pass_breakdown import _noop_hooks, _tracing, _with_cupti

        run, model = self.work.run, self.work.model
        if config == "no-op global hooks":
            _noop_hooks(run)
        elif config == "cupti only":
            _with_cupti(lambda source: run())
        elif config == "tracing only":
            _tracing(model, None, CpuOpTimer())(run)
        else:  # everything but the pushes: CUPTI collects, tracing tells it nothing
            _with_cupti(lambda source: _tracing(model, None, CpuOpTimer())(run))


# torch.profiler's Kineto keeps CUPTI's one callback subscription once it has run (the baseline runs it
# too), and ours then falls back to pushed ids: these are measured after everything else, in a process
# of the model's own (docs/design.md, "Correlation: what CUPTI needs")
KINETO = ("torch.profiler", "baseline")


def measure(name: str, passes: int) -> dict[str, Any]:
    """Bare and configured pass seconds for one model, ``passes`` pairs each; Kineto's configurations last."""
    work = zoo.build(name, "cuda", 1)
    configs = Configs(work)
    everything = CONFIGS + MECHANISMS
    out: dict[str, Any] = {"model": name, "bare": [], **{c: [] for c in everything}}
    with torch.no_grad():
        for _ in range(2):
            work.run()
        for group in ([c for c in everything if c not in KINETO], [c for c in everything if c in KINETO]):
            for config in group:  # the first call of each (start-up: Kineto, CUPTI) is not measured
                configs.pass_s(config)
            for key in configs.profile_s:
                if key in group:
                    configs.profile_s[key] = []
            for _ in range(passes):
                for config in group:
                    bare = timed(work.run)
                    seconds = configs.pass_s(config)
                    if seconds is not None:
                        out["bare"].append(bare)
                        out[config].append((seconds, bare))
    out["kernels"] = configs.kernels
    out["profile_s"] = configs.profile_s
    return out


def million(passes: int = 1, calls: int = 40) -> dict[str, Any]:
    """``llama_generate`` with ``calls`` generate() calls in one recorded pass."""
    from aitune_dispatch import ModuleFunctionKernelProfiler

    work = zoo.build("llama_generate", "cuda", calls)
    profiler = ModuleFunctionKernelProfiler()
    with torch.no_grad():
        zoo.build("llama_generate", "cuda", 1).run()
        bare = timed(work.run)
    gc.collect()
    with measure_growth() as growth:
        started = time.perf_counter()
        result = profiler.profile_result(work.function, module=work.model, warmup_iterations=0)
        frame = result.profiling_df()
        profile_s = time.perf_counter() - started
    meta = result.metadata
    kernels = result.activity.num_rows
    post_s = profile_s - float(meta[seconds_key("start")]) - float(meta[seconds_key("pass")])
    return {
        "calls": calls,
        "kernels": kernels,
        "rows": len(frame),
        "bare_s": bare,
        "profile_s": profile_s,
        "pass_s": float(meta[seconds_key("pass")]),
        "rss_mb": growth.peak_mb,
        "rss_retained_mb": growth.retained_mb,
        "post_us_per_kernel": post_s / max(kernels, 1) * 1e6,
        "dropped_records": result.dropped_records,
    }


def _ratio(pairs: list[tuple[float, float]], bare: list[float]) -> str:
    if not pairs:
        return "–"
    median = statistics.median(p for p, _ in pairs) / statistics.median(bare)
    each = [p / b for p, b in pairs]
    return f"{median:.2f} ({min(each):.2f}–{max(each):.2f})"


def render(results: list[dict[str, Any]], extra: dict[str, Any] | None) -> str:
    """The two tables of issue 10, as markdown."""
    lines = ["## Recorded pass over bare pass", "", COLUMNS, "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("status") in ("skipped", "error"):
            lines.append(f"| {r['model']} | – | – | – | – | – | – | – |")
            continue
        cells = [_ratio(r[c], [b for _, b in r[c]]) for c in CONFIGS]
        bare = statistics.median(r["bare"])
        lines.append(f"| {r['model']} | {r['kernels']:,} | {bare:.4f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Each ratio: median recorded pass over median bare pass of the same pairs; in brackets, the range of "
        "the per-pair ratios.",
        "",
        "## Where our recorded pass goes",
        "",
        "| model | empty function mode / bare | no-op global hooks / bare | cupti only / bare | tracing only / bare "
        "| ours without pushes / bare | ours, samples off / bare | ours / bare |",
        "|---|---|---|---|---|---|---|---|",
    ]
    order = ("empty function mode", *MECHANISMS, "ours, samples off", "ours")
    for r in results:
        if r.get("status") not in ("skipped", "error"):
            cells = [_ratio(r[c], [b for _, b in r[c]]) for c in order]
            lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## profile() wall time (warm-up 0)",
        "",
        "| model | kernels | ours s | baseline s | baseline / ours |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") in ("skipped", "error") or not r["profile_s"]["ours"] or not r["profile_s"]["baseline"]:
            continue
        ours, base = statistics.median(r["profile_s"]["ours"]), statistics.median(r["profile_s"]["baseline"])
        lines.append(f"| {r['model']} | {r['kernels']:,} | {ours:.3f} | {base:.3f} | {base / ours:.1f} |")
    if extra:
        lines += [
            "",
            "## 10^6 kernels",
            "",
            "| model | generate() calls | kernels | bare s | profile() s | profile() / bare | host memory growth MB | "
            "post-processing µs/kernel |",
            "|---|---|---|---|---|---|---|---|",
            f"| llama_generate | {extra['calls']} | {extra['kernels']:,} | {extra['bare_s']:.2f} | "
            f"{extra['profile_s']:.2f} | {extra['profile_s'] / extra['bare_s']:.2f} | {extra['rss_mb']:.0f} | "
            f"{extra['post_us_per_kernel']:.2f} |",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every model (and the 10^6-kernel run) and write pass_ratio.md / .json."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.pass_ratio", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--million", action="store_true")
    p.add_argument("--one", help="measure this model only, in this process, into OUT/<model>.json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("pass_ratio needs CUDA")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one:
        write_one(out, args.one, lambda: measure(args.one, args.passes))
        return 0
    results: list[dict[str, Any]] = []
    for name in args.models:
        results.append(measure_apart("benchmarks.pass_ratio", name, out, ["--passes", str(args.passes)]))
        print(render(results[-1:], None).splitlines()[-3], flush=True)
    extra = million() if args.million else None
    (out / "pass_ratio.json").write_text(json.dumps({"models": results, "million": extra}, indent=1))
    text = render(results, extra)
    (out / "pass_ratio.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
