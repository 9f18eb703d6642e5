"""The fixed cost of one recorded pass: ``pass − bare = a + b·R`` over R repetitions of the sample list.

    python -m benchmarks.fixed_cost --out OUT [--models ...] [--repeats 1 2 8] [--passes 5]

For each zoo model (bench size; a pipeline such as ``llama_generate`` runs its function R times,
with 8 new tokens a call) and each R, ``--passes`` rounds run in one process, each round a bare
pass beside every configuration: ours (``profile()``'s own ``seconds_pass`` with one warm-up pass);
ours with no warm-up pass; ours without samples (``function_names=set()``); our CUPTI source alone
(started before the timed pass, as ``profile()`` does) and our tracing alone (hooks, modes, gates
and op recorder entered before the timed pass and left after it, as ``profile()`` does, with the
CPU source: no CUPTI). Per configuration, ``excess(R)`` is the median over rounds of a pass minus
the bare pass run just before it (pairs, so that the lent machine's drift between rounds cancels),
and a least-squares line through the R's gives ``a`` (ms per pass) and ``b`` (ms per repetition).
``a`` is whatever a pass pays once however long it is; fitting each round on its own shows how much
it moves.

A diagnostic follows at R=1: two consecutive passes inside one CUPTI collection (a first pass
slower than the second is what CUPTI pays once per collection, outside what ``start()`` absorbs),
with the source's prime (one kernel launched once collection is on, before the timed pass) and
without it. Writes ``fixed_cost.md`` and
``fixed_cost.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from . import zoo
from .runners import sync, timed

MODELS = ("mlp", "resnet50", "sdpa_blocks", "vit_b_16", "efficientnet_b0", "gpt2", "llama_generate", "unet_sd15")
CONFIGS = ("ours", "ours, warm-up 0", "ours, samples off", "cupti only", "tracing only")
PIPELINE_OVERRIDES = {"llama_generate": {"new_tokens": 8}}


DEVICE = "cuda"  # --device cpu: a smoke run of the procedure (the CPU source; no CUPTI configuration)


def workload(name: str, repeat: int, base: zoo.Workload) -> zoo.Workload:
    """``base`` with its samples repeated ``repeat`` times; a pipeline's function called ``repeat`` times."""
    if base.function is None:
        return zoo.repeated(base, repeat)
    function = base.function

    def repeated_calls() -> None:
        for _ in range(repeat):
            function()

    return zoo.Workload(base.model, [], repeated_calls)


class Passes:
    """One timed recorded pass of each configuration over one workload."""

    def __init__(self, work: zoo.Workload) -> None:
        from aitune_dispatch import ModuleFunctionKernelProfiler

        self.work = work
        self.profiler = ModuleFunctionKernelProfiler(device=DEVICE)
        self.samples_off = ModuleFunctionKernelProfiler(function_names=set(), device=DEVICE)

    def ours(self, profiler: Any, warmup: int) -> float:
        from aitune_dispatch.schema import seconds_key

        work = self.work
        if work.function is not None:
            result = profiler.profile_result(work.function, module=work.model, warmup_iterations=warmup)
        else:
            result = profiler.profile_result(work.model, work.samples, warmup_iterations=warmup)
        seconds = float(result.metadata[seconds_key("pass")])
        profiler.release()
        return seconds

    def cupti_only(self, passes: int = 1, primed: bool = True) -> list[float]:
        from aitune_dispatch import collection

        source = collection.make_cuda_source("native") if DEVICE == "cuda" else collection.CpuOpTimer()
        if not primed and DEVICE == "cuda":  # as before the prime: the pass's own first launch starts CUPTI
            source.primed = False
        sync(DEVICE)
        source.start()
        try:
            return [timed(self.work.run, DEVICE) for _ in range(passes)]
        finally:
            source.stop()
            if DEVICE == "cuda":
                source.activity()

    def tracing_only(self) -> float:
        from aitune_dispatch.collection import CpuOpTimer
        from aitune_dispatch.tracing import ModuleTracker, TraceSession, make_tracer

        modules = ModuleTracker(self.work.model)
        tracer = make_tracer("native", modules.module_ids(), None, CpuOpTimer(), False)
        with TraceSession(modules, tracer):
            return timed(self.work.run, DEVICE)

    def run(self, config: str) -> float:
        if config == "ours":
            return self.ours(self.profiler, 1)
        if config == "ours, warm-up 0":
            return self.ours(self.profiler, 0)
        if config == "ours, samples off":
            return self.ours(self.samples_off, 1)
        if config == "cupti only":
            return self.cupti_only()[0]
        return self.tracing_only()


def fit(repeats: Sequence[int], excess: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``excess = a + b * R``."""
    mean_r, mean_e = statistics.fmean(repeats), statistics.fmean(excess)
    var = sum((r - mean_r) ** 2 for r in repeats)
    b = sum((r - mean_r) * (e - mean_e) for r, e in zip(repeats, excess)) / var if var else 0.0
    return mean_e - b * mean_r, b


def measure(name: str, repeats: Sequence[int], passes: int) -> dict[str, Any]:
    """Median bare and configured pass seconds at every R, the fits, and the R=1 diagnostics."""
    size = "bench" if DEVICE == "cuda" else "small"
    base = zoo.build(name, DEVICE, 1, size=size, **PIPELINE_OVERRIDES.get(name, {}) if size == "bench" else {})
    out: dict[str, Any] = {"model": name, "repeats": list(repeats), "bare": {}, **{c: {} for c in CONFIGS}}
    with torch.no_grad():
        base.run()
        for repeat in repeats:
            work = workload(name, repeat, base)
            configs = Passes(work)
            for config in CONFIGS:  # the first of each (CUPTI's and Kineto's start-up) is not measured
                configs.run(config)
            bare: list[float] = []
            runs: dict[str, list[float]] = {c: [] for c in CONFIGS}
            for _ in range(passes):
                for config in CONFIGS:
                    bare.append(timed(work.run, DEVICE))
                    runs[config].append(configs.run(config))
            out["bare"][repeat] = bare
            for config in CONFIGS:
                out[config][repeat] = runs[config]
        one = workload(name, 1, base)
        for key, primed in (("cupti_first_second_s", True), ("cupti_unprimed_first_second_s", False)):
            pairs = [Passes(one).cupti_only(passes=2, primed=primed) for _ in range(passes)]
            out[key] = [statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)]
    for index, config in enumerate(CONFIGS):
        # round k's bare pass ran just before its configured one: the pairs cancel the machine's drift
        paired = {
            r: [out[config][r][k] - out["bare"][r][k * len(CONFIGS) + index] for k in range(passes)] for r in repeats
        }
        out[f"{config} fit"] = fit(repeats, [statistics.median(paired[r]) for r in repeats])
        rounds = [fit(repeats, [paired[r][k] for r in repeats])[0] for k in range(passes)]
        out[f"{config} a per round"] = rounds
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def render(results: list[dict[str, Any]]) -> str:
    """``## Fixed cost per recorded pass`` and the mechanism table, as markdown."""
    lines = [
        "## Fixed cost per recorded pass",
        "",
        "| model | a ms | b ms per repeat | bare pass ms per repeat | a of single rounds ms |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") == "skipped":
            lines.append(f"| {r['model']} | – | – | – | – |")
            continue
        a, b = r["ours fit"]
        bare = statistics.median(statistics.median(v) / int(k) for k, v in r["bare"].items())
        rounds = r.get("ours a per round") or [float("nan")]
        lines.append(f"| {r['model']} | {_ms(a)} | {_ms(b)} | {_ms(bare)} | {_ms(min(rounds))} to {_ms(max(rounds))} |")
    lines += [
        "",
        "`pass − bare = a + b·R`, least squares over R = "
        + ", ".join(str(x) for x in (results[0]["repeats"] if results and "repeats" in results[0] else []))
        + "; each point the median over rounds of a recorded pass (`seconds_pass`) minus the bare pass run just "
        "before it; the last column fits each round on its own (how much a moves between rounds).",
        "",
        "| model | ours, warm-up 0: a ms | b ms | ours, samples off: a ms | b ms | CUPTI only: a ms | b ms "
        "| tracing only: a ms | b ms | CUPTI collection, 1st / 2nd pass ms "
        "| the same, unprimed start ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") == "skipped":
            continue
        cells = [f"{_ms(a)} | {_ms(b)}" for a, b in (r[f"{c} fit"] for c in CONFIGS[1:])]
        first, second = r["cupti_first_second_s"]
        old_first, old_second = r.get("cupti_unprimed_first_second_s", (float("nan"),) * 2)
        lines.append(
            f"| {r['model']} | " + " | ".join(cells) + f" | {_ms(first)} / {_ms(second)} "
            f"| {_ms(old_first)} / {_ms(old_second)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every model and write fixed_cost.md / .json."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.fixed_cost", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--repeats", nargs="+", type=int, default=[1, 2, 8])
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise SystemExit("fixed_cost needs CUDA (--device cpu: a smoke run on small models)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for name in args.models:
        try:
            results.append(measure(name, args.repeats, args.passes))
        except zoo.ModelUnavailable as error:
            results.append({"model": name, "status": "skipped", "reason": str(error)})
        print(render(results[-1:]).splitlines()[4], flush=True)
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
        # written after every model, so that a run cut short by its time limit keeps what it measured
        (out / "fixed_cost.json").write_text(json.dumps(results, indent=1, default=str))
        (out / "fixed_cost.md").write_text(render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
