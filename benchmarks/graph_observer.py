"""What ``observe_graph_captures`` costs a CUDA graph's capture and a recorded pass of its replays.

    python -m benchmarks.graph_observer --out OUT [--models mlp sdpa_blocks] [--passes 5]

Each model (``mlp``: four Linear layers with GELU between them on a (64, 1024) input; a zoo model
at bench size on its first sample) is wrapped in ``zoo.Graphed``, which captures it into a CUDA
graph on its first call (two warm-up iterations on a side stream, the capture, one replay) and
replays the graph on every call. Everything runs under ``torch.no_grad()``.

Capture: a fresh ``Graphed`` is built each time and called once, bare or inside
``with aitune_dispatch.observe_graph_captures(graphed):`` (timed inside the started observer: what a
capture pays while one observer watches many), between ``torch.cuda.synchronize()`` calls; the
observer's construction, start and stop around no capture are timed on their own (set-up), and the
observer's own ``seconds`` of each observed capture are kept (its work before ``capture_begin`` and
after ``capture_end``). After one unmeasured capture of each, ``--passes`` rounds each
time a bare capture and then an observed one, so that each observed capture has a bare one just
before it (pairs: the lent machine's drift between rounds cancels in the per-pair ratio).

Replay: one graph captured under the observer is kept; a replay pass calls the ``Graphed`` module on
each of R=20 copies of the input. A bare pass is timed as above; a recorded pass is
``ModuleFunctionKernelProfiler().profile_result(graphed, samples, warmup_iterations=1)``'s own
``seconds_pass``. After one unmeasured pass of each, ``--passes`` rounds each run a bare pass and then
a recorded one. From each recorded pass: the fraction of replayed kernel time attributed from the
capture (``result.graph_replays()``'s ``attributed``, weighted over graphs by ``total_us``) and the
``attribution`` values of the replayed rows. The same is run for a second graph of the same model
captured without the observer (its replays are left on the replaying launch: 0 attributed).
Writes ``graph_observer.md`` and ``graph_observer.json`` under ``--out`` after every model.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import zoo
from .runners import run_pass, timed

MODELS = ("mlp", "sdpa_blocks")
REPLAYS = 20  # R: calls of the Graphed module, one replay each, in one replay pass


def _mlp() -> tuple[nn.Module, torch.Tensor]:
    """Four Linear(1024, 1024) layers with GELU between them, seeded, and a (64, 1024) input."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(zoo.SEED)
        layers: list[nn.Module] = []
        for index in range(4):
            layers.append(nn.Linear(1024, 1024))
            if index < 3:
                layers.append(nn.GELU())
        model = nn.Sequential(*layers)
        example = torch.randn(64, 1024)
    return model.eval().to("cuda"), example.to("cuda")


def model_and_input(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The model ``name`` on CUDA and the one tensor a ``Graphed`` of it is called with."""
    if name == "mlp":
        return _mlp()
    work = zoo.build(name, "cuda", 1, size="bench")
    if work.function is not None or not work.samples:
        raise zoo.ModelUnavailable(f"{name} is a pipeline: Graphed captures a module called on one tensor")
    args, kwargs = work.samples[0]
    if kwargs or len(args) != 1 or not isinstance(args[0], torch.Tensor):
        raise zoo.ModelUnavailable(f"{name}'s samples are not one tensor: Graphed captures a module called on one")
    return work.model, args[0]


def _observed(graphed: zoo.Graphed, example: torch.Tensor) -> Any:
    """Capture ``graphed`` (its first call) inside ``observe_graph_captures``; the observer."""
    from aitune_dispatch import observe_graph_captures

    with observe_graph_captures(graphed) as observer:
        graphed(example)
    return observer


def _observer_state(observer: Any) -> dict[str, Any]:
    """What one observer saw: captures observed, captures skipped, and why one could not be observed."""
    return {"captured": observer.captured, "skipped": observer.skipped, "unavailable": observer.unavailable}


def _ratios(bare: Sequence[float], ours: Sequence[float]) -> dict[str, float]:
    """Median of each, the ratio of the medians, and the range of the per-pair ratios."""
    pairs = [o / b for b, o in zip(bare, ours)]
    bare_median, ours_median = statistics.median(bare), statistics.median(ours)
    return {
        "bare_median_s": bare_median,
        "ours_median_s": ours_median,
        "ratio": ours_median / bare_median,
        "ratio_min": min(pairs),
        "ratio_max": max(pairs),
    }


def capture_cost(model: nn.Module, example: torch.Tensor, passes: int) -> dict[str, Any]:
    """Seconds of a fresh capture (a new Graphed's first call): bare, and inside an observer already
    started; the observer's construction, start and stop around no capture; paired by round."""
    from aitune_dispatch import observe_graph_captures

    observers: list[dict[str, Any]] = []
    steps: dict[str, list[float]] = {"begin": [], "end": []}

    def bare() -> float:
        gc.collect()  # the last capture's graph and memory pool are freed before this one
        graphed = zoo.Graphed(model, example)
        return timed(lambda: graphed(example))

    def observed() -> float:
        gc.collect()
        graphed = zoo.Graphed(model, example)
        with observe_graph_captures(graphed) as observer:
            seconds = timed(lambda: graphed(example))
        observers.append(_observer_state(observer))
        for step, value in observer.seconds.items():
            steps[step].append(value)
        return seconds  # the graph, and with it its observation, is freed on return

    def set_up() -> float:
        graphed = zoo.Graphed(model, example)
        return timed(lambda: observe_graph_captures(graphed).start().stop())

    bare()  # the first of each is not measured (allocator pools, CUPTI's and the tracer's start-up)
    observed()
    set_up()
    bare_s: list[float] = []
    observed_s: list[float] = []
    set_up_s: list[float] = []
    for step in steps.values():
        step.clear()  # the unmeasured capture's
    for _ in range(passes):
        bare_s.append(bare())
        observed_s.append(observed())
        set_up_s.append(set_up())
    return {
        "bare_s": bare_s,
        "observed_s": observed_s,
        "set_up_s": set_up_s,
        "set_up_median_s": statistics.median(set_up_s),
        "steps_median_s": {step: statistics.median(v) for step, v in steps.items()},
        "observers": observers,
        **_ratios(bare_s, observed_s),
    }


def _attribution(result: Any) -> dict[str, Any]:
    """What the recorded pass attributed of the replayed kernels: time fraction and attribution values."""
    from aitune_dispatch import schema

    replays = result.graph_replays()
    total = float(replays["total_us"].sum())
    attributed = float((replays["attributed"] * replays["total_us"]).sum()) / total if total > 0 else float("nan")
    rows = result.to_pandas()
    rows = rows[rows["graph_id"] != schema.NOT_IN_GRAPH]
    values = rows["attribution"].value_counts()
    return {
        "attributed": attributed,
        "graphs": len(replays),
        "replays": int(replays["replays"].sum()),
        "kernels": int(replays["kernels"].sum()),
        "replayed_us": total,
        "attribution": {str(k): int(v) for k, v in values.items()},
    }


def replay_cost(graphed: zoo.Graphed, example: torch.Tensor, passes: int) -> dict[str, Any]:
    """Seconds of a replay pass of R calls, bare and recorded, paired by round; what each recorded pass attributed."""
    from aitune_dispatch import ModuleFunctionKernelProfiler
    from aitune_dispatch.schema import seconds_key

    samples = [((example,), {})] * REPLAYS
    profiler = ModuleFunctionKernelProfiler()
    attribution: list[dict[str, Any]] = []
    messages: set[str] = set()

    def bare() -> float:
        return timed(lambda: run_pass(graphed, samples))

    def ours() -> float:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = profiler.profile_result(graphed, samples, warmup_iterations=1)
        messages.update(str(w.message) for w in caught)
        seconds = float(result.metadata[seconds_key("pass")])
        attribution.append(_attribution(result))
        del result
        profiler.release()
        return seconds

    bare()  # the first of each is not measured
    ours()
    attribution.clear()
    bare_s: list[float] = []
    ours_s: list[float] = []
    for _ in range(passes):
        bare_s.append(bare())
        ours_s.append(ours())
    return {
        "bare_s": bare_s,
        "ours_s": ours_s,
        "attribution": attribution,
        "warnings": sorted(messages),
        **_ratios(bare_s, ours_s),
    }


def measure(name: str, passes: int) -> dict[str, Any]:
    """Capture and replay costs of ``name``, observed and (for the replays' attribution) unobserved."""
    model, example = model_and_input(name)
    out: dict[str, Any] = {"model": name, "input": list(example.shape), "replays_per_pass": REPLAYS}
    with torch.no_grad():
        model(example)
        out["capture"] = capture_cost(model, example, passes)
        observed = zoo.Graphed(model, example)
        observer = _observed(observed, example)
        out["observer"] = _observer_state(observer)
        out["replay_observed"] = replay_cost(observed, example, passes)
        del observed, observer
        gc.collect()
        unobserved = zoo.Graphed(model, example)
        unobserved(example)  # captured with no observer active
        out["replay_unobserved"] = replay_cost(unobserved, example, passes)
        del unobserved
        gc.collect()
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _ratio(r: dict[str, Any]) -> str:
    return f"{r['ratio']:.2f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})"


def _attributed(replay: dict[str, Any]) -> str:
    """The attributed fraction over the rounds (a range where they differ) and the attribution values seen."""
    rounds = replay["attribution"]
    if not rounds:
        return "–"
    fractions = [a["attributed"] for a in rounds]
    low, high = min(fractions), max(fractions)
    fraction = f"{low:.1%}" if low == high else f"{low:.1%}–{high:.1%}"
    values = sorted({v for a in rounds for v in a["attribution"]})
    return f"{fraction} ({', '.join(values) or 'no replayed rows'})"


def render(results: list[dict[str, Any]]) -> str:
    """``## CUDA graphs captured before profile()``: the capture and replay tables, as markdown."""
    lines = [
        "## CUDA graphs captured before profile()",
        "",
        "| model | bare capture ms | observed capture ms | ratio (range) | observer set-up, no capture ms "
        "| of the observed capture: observer's begin, end ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") == "skipped":
            lines.append(f"| {r['model']} | – | – | – | – | – |")
            continue
        c = r["capture"]
        steps = c["steps_median_s"]
        lines.append(
            f"| {r['model']} | {_ms(c['bare_median_s'])} | {_ms(c['ours_median_s'])} | {_ratio(c)} "
            f"| {_ms(c['set_up_median_s'])} | {_ms(steps['begin'])}, {_ms(steps['end'])} |"
        )
    lines += [
        "",
        "| model | bare replay pass ms | recorded replay pass ms | ratio (range) "
        "| replayed time attributed, observed | the same, unobserved |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") == "skipped":
            lines.append(f"| {r['model']} | – | – | – | – | – |")
            continue
        p = r["replay_observed"]
        lines.append(
            f"| {r['model']} | {_ms(p['bare_median_s'])} | {_ms(p['ours_median_s'])} | {_ratio(p)} "
            f"| {_attributed(p)} | {_attributed(r['replay_unobserved'])} |"
        )
    notes = []
    for r in results:
        if r.get("status") == "skipped":
            notes.append(f"- {r['model']}: skipped ({r.get('reason', '')})")
            continue
        observers = [r["observer"], *r["capture"]["observers"]]
        unavailable = sorted({o["unavailable"] for o in observers if o["unavailable"]})
        if any(o["captured"] != 1 for o in observers) or unavailable:
            counts = ", ".join(str(o["captured"]) for o in observers)
            notes.append(f"- {r['model']}: captures observed per observer {counts}; {'; '.join(unavailable)}")
    lines += [
        "",
        f"Each model is wrapped in `zoo.Graphed` (CUDA graph captured on its first call). Capture: a new `Graphed` "
        "called once (two warm-up iterations on a side stream, the capture, one replay), bare or inside "
        "`with observe_graph_captures(graphed):` (timed from inside the started observer), between "
        "`torch.cuda.synchronize()` calls; medians over the rounds, each observed capture paired with a bare one "
        "just before it (the range: of the per-pair ratios), after one unmeasured capture of each. Set-up: an "
        "observer built, started and stopped around no capture. The steps: the observer's own `seconds` of the "
        "observed capture (before `capture_begin`: subscription, tracing installed; after `capture_end`: "
        "tracing removed, trace and nodes kept). Replay: a pass "
        f"is R={REPLAYS} calls of the `Graphed` module (one replay each), bare or recorded (`profile_result(graphed, "
        "samples, warmup_iterations=1)`'s `seconds_pass`), paired the same way. Attributed: the fraction of the "
        "replayed kernel time `graph_replays()` says was attributed from the capture (its `attributed`, weighted "
        "over graphs by `total_us`), with the `attribution` values of the replayed rows; the last column replays a "
        "second graph of the same model captured without the observer.",
    ]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every model and write graph_observer.md / .json."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.graph_observer", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = p.parse_args(argv)
    if args.device != "cuda" or not torch.cuda.is_available():
        raise SystemExit("graph_observer needs CUDA")
    zoo.measure_each(
        args.models,
        lambda name: measure(name, args.passes),
        render,
        Path(args.out),
        "graph_observer",
        progress=lambda results: f"graph_observer: {results[-1]['model']} done",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
