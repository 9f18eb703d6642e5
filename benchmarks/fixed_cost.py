"""The fixed cost of one recorded pass: ``pass − bare = a + b·R`` over R repetitions of the sample list.

    python -m benchmarks.fixed_cost --out OUT [--models ...] [--repeats 1 2 8] [--passes 5] [--configs ...]

For each zoo model (bench size; a pipeline such as ``llama_generate`` runs its function R times,
with 8 new tokens a call) and each R, ``--passes`` rounds run in one process, each round a bare
pass beside every configuration: ours (``profile()``'s own ``seconds_pass`` with one warm-up pass);
our CUPTI source alone (started before the timed pass, as ``profile()`` does) and our tracing alone
(module tracking, modes, gates and op recorder entered before the timed pass and left after it, as
``profile()`` does, with the CPU source: no CUPTI); ``--configs`` adds ours with no warm-up pass and
ours without samples (``function_names=set()``).

What steadies ``a`` on long, GPU-bound passes (``unet_sd15``, ``llama_generate``), where single
passes move by tens of ms (on the lent H200 not enough to settle it to 0.5 ms there: RESULTS.md, session
36; the empty pass and the interval say how far it is settled):

- the bare pass comes straight after an untimed one, as ``profile()``'s recorded pass comes straight
  after its warm-up pass, so both start on a GPU that is busy and clocked up rather than one idle
  since the last configuration's post-processing;
- each configured pass is compared with the mean of the bare passes just before and just after it,
  which cancels the machine's drift between rounds where it is linear;
- the objects alive once the model is built are frozen out of the garbage collector
  (``gc.freeze()``), so that a full collection, which would walk every object of torch,
  transformers and diffusers, does not land in one pass and not the other.

Per configuration, ``excess(R)`` is the median over rounds, and a least-squares line through the
R's gives ``a`` (ms per pass) and ``b`` (ms per repetition). ``a`` is whatever a pass pays once
however long it is; fitting each round on its own shows how much it moves.

A diagnostic follows at R=1: two consecutive passes inside one CUPTI collection (a first pass
slower than the second is what CUPTI pays once per collection, outside what ``start()`` absorbs),
with the source's prime (one kernel launched once collection is on, before the timed pass) and
without it. Writes ``fixed_cost.md`` and ``fixed_cost.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from . import zoo
from .runners import sync, timed

MODELS = ("mlp", "resnet50", "sdpa_blocks", "vit_b_16", "efficientnet_b0", "gpt2", "llama_generate", "unet_sd15")
CONFIGS = ("ours", "ours, warm-up 0", "ours, samples off", "cupti only", "tracing only")
DEFAULT_CONFIGS = ("ours", "cupti only", "tracing only")
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

    def ours(self, profiler: Any, warmup: int, work: zoo.Workload | None = None) -> float:
        """``seconds_pass`` of one profile() of ``work`` (this runner's workload by default)."""
        from aitune_dispatch.schema import seconds_key

        work = self.work if work is None else work
        if work.function is not None:
            result = profiler.profile_result(work.function, module=work.model, warmup_iterations=warmup)
        else:
            result = profiler.profile_result(work.model, work.samples, warmup_iterations=warmup)
        seconds = float(result.metadata[seconds_key("pass")])
        profiler.release()
        return seconds

    def empty(self) -> float:
        """``seconds_pass`` of a profile() whose pass calls nothing (R = 0): what the pass window holds
        besides the user's calls, with no model time to hide it."""
        nothing = zoo.Workload(self.work.model, [], None if self.work.function is None else (lambda: None))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "never called" / "never ran": the point of this pass
            return self.ours(self.profiler, 1, nothing)

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


def interval(paired: dict[Any, list[float]], repeats: Sequence[int], draws: int = 2000) -> tuple[float, float]:
    """The 5th and 95th percentiles of ``a`` over bootstrap draws of the rounds (each R's rounds drawn
    with replacement, medians fitted): how far the noise of the lent machine leaves ``a`` open."""
    rng = random.Random(0)
    fits = sorted(
        fit(repeats, [statistics.median(rng.choices(paired[r], k=len(paired[r]))) for r in repeats])[0]
        for _ in range(draws)
    )
    return fits[int(0.05 * (draws - 1))], fits[int(0.95 * (draws - 1))]


def bare_after_warm(work: zoo.Workload) -> float:
    """A bare pass timed straight after an untimed one, as profile() times its pass after a warm-up."""
    work.run()
    return timed(work.run, DEVICE)


def excess(configured: Sequence[float], bare: Sequence[float], offset: int, stride: int) -> list[float]:
    """Each configured pass minus the mean of the bare passes just before and just after it.

    ``bare`` is the whole interleaved sequence (bare, one configured pass, bare, the next, ...); the
    ``k``-th pass of this configuration ran between ``bare[k * stride + offset]`` and the bare pass
    after that one."""
    return [c - (bare[k * stride + offset] + bare[k * stride + offset + 1]) / 2 for k, c in enumerate(configured)]


def measure(name: str, repeats: Sequence[int], passes: int, configs: Sequence[str] = DEFAULT_CONFIGS) -> dict[str, Any]:
    """Median bare and configured pass seconds at every R, the fits, and the R=1 diagnostics."""
    size = "bench" if DEVICE == "cuda" else "small"
    base = zoo.build(name, DEVICE, 1, size=size, **PIPELINE_OVERRIDES.get(name, {}) if size == "bench" else {})
    out: dict[str, Any] = {"model": name, "repeats": list(repeats), "configs": list(configs), "bare": {}}
    out.update({c: {} for c in configs})
    gc.collect()
    gc.freeze()  # the model and every imported package: out of reach of a full collection
    try:
        with torch.no_grad():
            base.run()
            for repeat in repeats:
                work = workload(name, repeat, base)
                runner = Passes(work)
                for config in configs:  # the first of each (CUPTI's and Kineto's start-up) is not measured
                    runner.run(config)
                # bare, config 1, bare, config 2, ..., bare: every configured pass between two bare ones
                sequence: list[float] = [bare_after_warm(work)]
                runs: dict[str, list[float]] = {c: [] for c in configs}
                for _ in range(passes):
                    for config in configs:
                        runs[config].append(runner.run(config))
                        sequence.append(bare_after_warm(work))
                out["bare"][repeat] = sequence
                for index, config in enumerate(configs):
                    out[config][repeat] = runs[config]
                    out.setdefault(f"{config} excess", {})[repeat] = excess(runs[config], sequence, index, len(configs))
            one = workload(name, 1, base)
            empty = Passes(one)
            empty.empty()  # as every configuration's first: not measured
            out["empty"] = [empty.empty() for _ in range(passes)]
            out["empty bare"] = [timed(lambda: None, DEVICE) for _ in range(passes)]
            for key, primed in (("cupti_first_second_s", True), ("cupti_unprimed_first_second_s", False)):
                pairs = [Passes(one).cupti_only(passes=2, primed=primed) for _ in range(passes)]
                out[key] = [statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)]
    finally:
        gc.unfreeze()
    for config in configs:
        paired = out[f"{config} excess"]
        out[f"{config} fit"] = fit(repeats, [statistics.median(paired[r]) for r in repeats])
        out[f"{config} a per round"] = [fit(repeats, [paired[r][k] for r in repeats])[0] for k in range(passes)]
        out[f"{config} a interval"] = interval(paired, repeats)
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def render(results: list[dict[str, Any]]) -> str:
    """``## Fixed cost per recorded pass`` and the mechanism table, as markdown."""
    lines = [
        "## Fixed cost per recorded pass",
        "",
        "| model | a ms | b ms per repeat | bare pass ms per repeat | a of single rounds ms "
        "| a, 90% bootstrap interval ms | empty pass (R = 0): ours − bare ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") == "skipped":
            lines.append(f"| {r['model']} | – | – | – | – | – | – |")
            continue
        a, b = r["ours fit"]
        bare = statistics.median(statistics.median(v) / int(k) for k, v in r["bare"].items())
        rounds = r.get("ours a per round") or [float("nan")]
        low, high = r.get("ours a interval", (float("nan"),) * 2)
        empty = statistics.median(r["empty"]) - statistics.median(r["empty bare"]) if "empty" in r else float("nan")
        lines.append(
            f"| {r['model']} | {_ms(a)} | {_ms(b)} | {_ms(bare)} | {_ms(min(rounds))} to {_ms(max(rounds))} "
            f"| {_ms(low)} to {_ms(high)} | {_ms(empty)} |"
        )
    lines += [
        "",
        "`pass − bare = a + b·R`, least squares over R = "
        + ", ".join(str(x) for x in (results[0]["repeats"] if results and "repeats" in results[0] else []))
        + "; each point the median over rounds of a recorded pass (`seconds_pass`) minus the mean of the bare "
        "passes just before and just after it (each bare pass timed straight after an untimed one, as the "
        "recorded pass follows profile()'s warm-up); the last column fits each round on its own (how much a "
        "moves between rounds), the interval draws the rounds again (2,000 bootstrap draws), and the empty pass is "
        "`profile()` of a pass that calls nothing (median over rounds) against a bare empty pass (two "
        "synchronizes).",
        "",
    ]
    measured = [r for r in results if r.get("status") != "skipped"]
    others = [c for c in CONFIGS[1:] if measured and all(c in r.get("configs", CONFIGS) for r in measured)]
    header = "| model | " + "".join(f"{c}: a ms | b ms | " for c in others)
    header += "CUPTI collection, 1st / 2nd pass ms | the same, unprimed start ms |"
    lines += [header, "|---|" + "---|---|" * len(others) + "---|---|"]
    for r in measured:
        cells = [f"{_ms(a)} | {_ms(b)}" for a, b in (r[f"{c} fit"] for c in others)]
        first, second = r["cupti_first_second_s"]
        old_first, old_second = r.get("cupti_unprimed_first_second_s", (float("nan"),) * 2)
        lines.append(
            f"| {r['model']} | " + "".join(cell + " | " for cell in cells) + f"{_ms(first)} / {_ms(second)} "
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
    p.add_argument(
        "--configs", nargs="+", default=list(DEFAULT_CONFIGS), choices=CONFIGS, help="ours is always measured"
    )
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise SystemExit("fixed_cost needs CUDA (--device cpu: a smoke run on small models)")
    configs = ["ours", *(c for c in args.configs if c != "ours")]
    zoo.measure_each(
        args.models,
        lambda name: measure(name, args.repeats, args.passes, configs),
        render,
        Path(args.out),
        "fixed_cost",
        progress=lambda results: render(results[-1:]).splitlines()[4],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
