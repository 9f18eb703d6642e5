"""The recorded pass over the bare pass at R = 1 and R = 8, ours against torch.profiler, both interceptions.

    python -m benchmarks.recorded_pass --out OUT [--models ...] [--repeats 1 8] [--passes 5]

For each zoo model (bench size; R repetitions of its sample list, or of its function for a pipeline
such as ``llama_generate``, which runs with 8 new tokens a call) and each R, ``--passes`` rounds run in
one process of its own. A round times, each right after a bare pass of its own: ours
(``profile()``'s own ``seconds_pass``, one warm-up pass, launches linked to ops by the CUPTI launch
callback, functional calls seen where the default puts them: at the function objects on CPython >= 3.12),
ours with ``interception="mode"`` (the TorchFunctionMode, the path before the function-object hooks and
still the one on 3.10/3.11), ours without samples (``function_names=set()``) and ours with
``correlation="push"`` (an id pushed to CUPTI per op and scope, the path before the launch callback),
and at R=1 each mechanism of ours alone (``benchmarks/pass_breakdown.py``'s: an empty
TorchFunctionMode, no-op global hooks, our CUPTI source alone, our tracing alone with no CUPTI; and the
function-object hooks alone: every functional call recorded with its samples, no module stack, no aten
op, no CUPTI); then, in the same
process, the rounds of the pass under ``torch.profiler`` (CPU and CUDA activities, its pass alone).
torch.profiler comes last because its Kineto keeps CUPTI's one callback subscription once it has
run, and ours then falls back to pushed ids (``docs/design.md``, "Coexistence with torch.profiler").
Each ratio is the median configured pass over the median of the bare passes paired with it; in
brackets, the range of the per-pair ratios. The first pass of every configuration is not timed
(CUPTI's and Kineto's start-up). Writes ``recorded_pass.md`` and ``recorded_pass.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from . import zoo
from .apart import measure_apart, write_one
from .fixed_cost import PIPELINE_OVERRIDES, workload
from .runners import timed

MODELS = ("mlp", "resnet50", "sdpa_blocks", "vit_b_16", "efficientnet_b0", "gpt2", "llama_generate", "unet_sd15")
OURS = ("ours", "ours, mode", "ours, samples off", "ours, push")
# where our pass goes, at R=1 (benchmarks/pass_breakdown.py's mechanisms, each on its own)
MECHANISMS = ("empty function mode", "function-object hooks alone", "no-op global hooks", "cupti only", "tracing only")
CONFIGS = (*OURS, *MECHANISMS, "torch.profiler")
COLUMNS = (
    "| model | kernels | bare pass s | torch.profiler / bare R=1 | ours, mode / bare R=1 | ours / bare R=1 "
    "| torch.profiler / bare R=8 | ours, mode / bare R=8 | ours / bare R=8 | ours, samples off / bare R=8 |"
)


class Passes:
    """One timed recorded pass of each configuration over one workload."""

    def __init__(self, work: zoo.Workload) -> None:
        from aitune_dispatch import ModuleFunctionKernelProfiler

        self.work = work
        self.profilers = {
            "ours": ModuleFunctionKernelProfiler(),
            "ours, mode": ModuleFunctionKernelProfiler(interception="mode"),
            "ours, samples off": ModuleFunctionKernelProfiler(function_names=set()),
            "ours, push": ModuleFunctionKernelProfiler(correlation="push"),
        }
        self.kernels = 0
        self.correlation: dict[str, str] = {}
        self.interception: dict[str, str] = {}

    def mechanism(self, config: str) -> float:
        """Seconds of one pass under one mechanism of ours alone (or an empty mode, or no-op hooks)."""
        from aitune_dispatch.collection import CpuOpTimer

        from .pass_breakdown import _empty_mode, _noop_hooks, _tracing, _with_cupti

        run, seconds = self.work.run, []
        if config == "empty function mode":
            return timed(lambda: _empty_mode(run))
        if config == "no-op global hooks":
            return timed(lambda: _noop_hooks(run))
        if config == "function-object hooks alone":  # installed and removed outside the timed pass
            _function_hooks(lambda: seconds.append(timed(run)))
            return seconds[0]
        if config == "cupti only":  # started and stopped outside the timed pass, as profile() does
            _with_cupti(lambda source: seconds.append(timed(run)))
        else:  # hooks, function mode and op recorder, entered outside the timed pass; no CUPTI
            _tracing(self.work.model, None, CpuOpTimer())(lambda: seconds.append(timed(run)))
        return seconds[0]

    def run(self, config: str) -> float:
        """Seconds of one recorded pass of ``config``."""
        if config in MECHANISMS:
            return self.mechanism(config)
        if config == "torch.profiler":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                seconds = timed(self.work.run)
            return seconds
        from aitune_dispatch.schema import META_CORRELATION, META_INTERCEPTION, seconds_key

        profiler, work = self.profilers[config], self.work
        if work.function is not None:
            result = profiler.profile_result(work.function, module=work.model, warmup_iterations=1)
        else:
            result = profiler.profile_result(work.model, work.samples, warmup_iterations=1)
        if config == "ours":
            self.kernels = result.activity.num_rows
        self.correlation[config] = result.metadata.get(META_CORRELATION, "?")
        self.interception[config] = result.metadata.get(META_INTERCEPTION, "?")
        seconds = float(result.metadata[seconds_key("pass")])
        profiler.release()
        return seconds


def _function_hooks(body: Callable[[], None]) -> None:
    """``body()`` while the function-object hooks record every functional call, nothing else traced."""
    from aitune_dispatch.tracing import native

    tracer = native.load()
    tracer.start(**native.NativePass.hooks_only().keywords())
    try:
        body()
    finally:
        tracer.stop()
        tracer.take()


def _interceptions(results: list[dict[str, Any]], config: str) -> str:
    """What ``config`` ran with, as its runs' metadata say (one value, or each model's)."""
    seen = {r.get("interception", {}).get(config, "?") for r in results if r.get("status") not in ("skipped", "error")}
    return ", ".join(sorted(seen)) or "?"


def measure(name: str, repeats: Sequence[int], passes: int) -> dict[str, Any]:
    """Bare and configured pass seconds, paired, at every R."""
    base = zoo.build(name, "cuda", 1, **PIPELINE_OVERRIDES.get(name, {}))
    out: dict[str, Any] = {
        "model": name,
        "repeats": list(repeats),
        "kernels": {},
        "pairs": {},
        "correlation": {},
        "interception": {},
    }
    with torch.no_grad():
        base.run()
        for ours in (True, False):  # Kineto last: it keeps CUPTI's callbacks once it has run
            for repeat in repeats:
                group = (*OURS, *(MECHANISMS if repeat == 1 else ())) if ours else ("torch.profiler",)
                configs = Passes(workload(name, repeat, base))
                for config in group:
                    configs.run(config)
                pairs = out["pairs"].setdefault(repeat, {})
                for config in group:
                    pairs[config] = []
                for _ in range(passes):
                    for config in group:
                        bare = timed(configs.work.run)
                        pairs[config].append((configs.run(config), bare))
                if "ours" in group:
                    out["kernels"][repeat] = configs.kernels
                    out["correlation"] = configs.correlation
                    out["interception"] = configs.interception
                torch.cuda.empty_cache()
    return out


def measure_alone(name: str, repeats: Sequence[int], passes: int, out: Path) -> dict[str, Any]:
    """:func:`measure` in a process of its own (a previous model's torch.profiler holds CUPTI's callbacks)."""
    result = measure_apart(
        "benchmarks.recorded_pass", name, out, ["--passes", str(passes), "--repeats", *map(str, repeats)]
    )
    if "pairs" in result:  # JSON keys are strings
        result["pairs"] = {int(repeat): pairs for repeat, pairs in result["pairs"].items()}
        result["kernels"] = {int(repeat): kernels for repeat, kernels in result["kernels"].items()}
    return result


def ratio(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Median pass over median bare pass, and the range of the per-pair ratios."""
    median = statistics.median(p for p, _ in pairs) / statistics.median(b for _, b in pairs)
    each = [p / b for p, b in pairs]
    return median, min(each), max(each)


def _cell(pairs: list[tuple[float, float]] | None) -> str:
    if not pairs:
        return "–"
    median, low, high = ratio(pairs)
    return f"{median:.2f} ({low:.2f}–{high:.2f})"


def render(results: list[dict[str, Any]]) -> str:
    """``## Recorded pass over bare pass`` and the two correlation paths side by side, as markdown."""
    lines = ["## Recorded pass over bare pass", "", COLUMNS, "|---|---|---|---|---|---|---|---|---|---|"]
    pairs_of: Callable[[dict[str, Any], int, str], Any] = lambda r, rep, c: r["pairs"].get(rep, {}).get(c)  # noqa: E731
    for r in results:
        if r.get("status") in ("skipped", "error"):
            lines.append(f"| {r['model']} | – | – | – | – | – | – | – | – | – |")
            continue
        first = r["repeats"][0]
        bare = statistics.median(b for _, b in pairs_of(r, first, "ours"))
        cells = [
            _cell(pairs_of(r, 1, "torch.profiler")),
            _cell(pairs_of(r, 1, "ours, mode")),
            _cell(pairs_of(r, 1, "ours")),
            _cell(pairs_of(r, 8, "torch.profiler")),
            _cell(pairs_of(r, 8, "ours, mode")),
            _cell(pairs_of(r, 8, "ours")),
            _cell(pairs_of(r, 8, "ours, samples off")),
        ]
        lines.append(f"| {r['model']} | {r['kernels'].get(first, 0):,} | {bare:.4f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Kernels and the bare pass are R=1's. Each ratio: median recorded pass over the median of the bare passes "
        "paired with it; in brackets, the range of the per-pair ratios. ours: functional calls seen where the "
        "default sees them ("
        + _interceptions(results, "ours")
        + '); ours, mode: interception="mode" ('
        + _interceptions(results, "ours, mode")
        + ").",
        "",
        "### The two correlation paths",
        "",
        "| model | ours (launch callback) / bare R=1 | ours, push / bare R=1 | ours (launch callback) / bare R=8 "
        "| ours, push / bare R=8 |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") in ("skipped", "error"):
            continue
        cells = [_cell(pairs_of(r, rep, c)) for rep in (1, 8) for c in ("ours", "ours, push")]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "### Where our recorded pass goes (R=1)",
        "",
        "| model | empty function mode / bare | function-object hooks alone / bare | no-op global hooks / bare "
        "| cupti only / bare | tracing only / bare | ours, samples off / bare | ours / bare |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") in ("skipped", "error"):
            continue
        cells = [_cell(pairs_of(r, 1, c)) for c in (*MECHANISMS, "ours, samples off", "ours")]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every model and write recorded_pass.md / .json."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.recorded_pass", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--repeats", nargs="*", type=int, default=[1, 8])
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--one", help="measure this model only, in this process, into OUT/<model>.json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("recorded_pass needs CUDA")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one:
        write_one(out, args.one, lambda: measure(args.one, args.repeats, args.passes))
        return 0
    results: list[dict[str, Any]] = []
    for name in args.models:
        results.append(measure_alone(name, args.repeats, args.passes, out))
        print(render(results[-1:]).splitlines()[4], flush=True)
        (out / "recorded_pass.json").write_text(json.dumps(results, indent=1, default=str))
        (out / "recorded_pass.md").write_text(render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
